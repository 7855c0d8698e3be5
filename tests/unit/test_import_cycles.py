"""Layering (issue 16, item 13): no import cycles between packages, no patched aiohttp.

- `common` is what every package builds on: it imports no other swiftlite package (daemon
  plumbing used to import the ring, which imports `common`);
- `db` is what containers and accounts share: it imports neither of them (the replication
  endpoint and the replicator are given their role's broker class);
- a broker (and the listing walk it uses) loads no HTTP stack: `db.listing` has no aiohttp,
  `db.listing_http` holds what reads requests and makes responses.

Each import runs in a fresh interpreter, so what one module pulls in is seen alone.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "swiftlite"


def loaded_after(code: str) -> set[str]:
    """Modules loaded by a fresh interpreter after running `code`."""
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys\nprint('\\n'.join(sorted(sys.modules)))"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    return set(out.stdout.split())


def under(modules: set[str], *prefixes: str) -> set[str]:
    return {m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)}


@pytest.mark.parametrize("module", ["swiftlite.db.broker", "swiftlite.db.listing",
                                    "swiftlite.container.broker", "swiftlite.account.broker"])
def test_brokers_load_no_http_stack(module):
    assert under(loaded_after(f"import {module}"), "aiohttp") == set()


def test_daemon_plumbing_does_not_import_the_ring():
    assert under(loaded_after("import swiftlite.common.daemon"), "swiftlite.ring") == set()


@pytest.mark.parametrize("module", ["swiftlite.db.replication_server", "swiftlite.db.replicator",
                                    "swiftlite.db.server"])
def test_db_imports_no_role(module):
    loaded = loaded_after(f"import {module}")
    assert under(loaded, "swiftlite.container", "swiftlite.account") == set()


def imports_of(path: Path) -> set[str]:
    """Every swiftlite module a file imports, at any depth (function-level imports too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return {m for m in found if m.startswith("swiftlite")}


# package -> the swiftlite packages it may import (besides itself)
ALLOWED = {
    "common": set(),
    "ring": {"common"},
    "db": {"common", "ring"},
    "image": set(),  # the variant renderer: no server code in its worker processes
}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_layering(package):
    bad = []
    for path in sorted((PACKAGE / package).rglob("*.py")):
        for mod in imports_of(path):
            top = mod.split(".")[1] if "." in mod else ""
            if top != package and top not in ALLOWED[package]:
                bad.append(f"{path.relative_to(ROOT)} imports {mod}")
    assert bad == []


def test_storage_servers_parse_with_the_one_adapted_parser():
    """aiohttp's request parser is swapped in one place only, common/lenient_parser.py, by
    every server (make_app): the storage servers need its adaptations as much as the proxy
    does. (An older swap made REPLICATE parse; replication uses MERGE routes now.)"""
    code = """
import asyncio, os, secrets, tempfile
os.environ.setdefault("SWIFTLITE_BACKEND_SECRET", secrets.token_urlsafe(32))
from aiohttp import web_protocol
from swiftlite.common.lenient_parser import LenientRequestParser
from swiftlite.common.config import Section
from swiftlite.account.server import create_app as account_app
from swiftlite.container.server import create_app as container_app
from swiftlite.obj.server import create_app as object_app
conf = Section(devices=tempfile.mkdtemp())
asyncio.run(object_app(conf))
container_app(conf)
account_app(conf)
assert web_protocol.HttpRequestParser is LenientRequestParser, web_protocol.HttpRequestParser
"""
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)
