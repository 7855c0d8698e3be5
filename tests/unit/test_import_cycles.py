"""Layering (issue 37, item 4): every package's allowed imports, written down and tested, and
no import circle anywhere.

The floors, lowest first (a package imports only packages listed under it in ALLOWED):

- `common`: imports no other package; inside it, floors: the primitives (its own modules and
  `ec/`), then `clients/` and `observe/` (neither imports the other), then `runtime/`; and no
  module but `runtime/aiohttp_seams.py` (and the parser built on aiohttp's) touches
  aiohttp's internals;
- `image`: the image variant renderer, run in worker processes: imports no other package;
- `ring`: placement; `db`: what containers and accounts share (given their role's broker
  class, it imports neither); `obj`: the object server and daemons over the object storage
  engine (`obj/engine/`: no HTTP stack, nothing of the role above it; other roles use only
  the names its `__init__` exports);
- `account`, `container`: the database roles (the container-reconciler talks to object
  servers through `obj`'s client side);
- `proxy`: the front ends (image variants through `image`); inside it, floors: the caches
  (`proxy/caches`) and the backend (`proxy/backend`: nodes, requests, the fan-out engine,
  local reads) import nothing else of the proxy; the core (its top-level modules) uses
  both and imports neither the middleware nor the S3 front end; those two use the core and
  the caches (never the backend directly) and import each other not at all; the web
  console (`proxy/console`) may use the core and S3's credentials;
- `migrate`, `ops`: tools over the cluster; the top-level modules (`cli`, `node`, `roles`,
  `allinone`) are entry points, imported by no package.

Also: a broker (and the listing walk it uses) loads no HTTP stack (`db.listing` has no
aiohttp; `db.listing_http` reads requests and makes responses), and daemon plumbing does not
load the ring. Those imports run in a fresh interpreter, so what one module pulls in is seen
alone; the rest reads every file's imports (function-level ones too) with `ast`.
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
    assert under(loaded_after("import swiftlite.common.runtime.daemon"), "swiftlite.ring") == set()


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
    "obj": {"common", "ring"},
    "account": {"common", "db"},
    "container": {"common", "db", "obj", "ring"},
    "proxy": {"common", "db", "image", "obj", "ring"},
    "migrate": {"common", "ring"},
    "ops": {"common", "container", "db", "migrate", "proxy", "ring"},
}
ENTRY_MODULES = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
# Inside proxy/: sub-package -> the proxy sub-packages it may import ("" is the core: the
# modules right under proxy/).
# The console sits outside both front ends: it trades an S3 key for a token (s3's
# credentials) and otherwise talks to the core.
PROXY_ALLOWED = {"caches": set(), "backend": set(), "": {"backend", "caches"},
                 "middleware": {"", "caches"}, "s3": {"", "caches"}, "console": {"", "s3"}}


def all_modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def package_of(module: str) -> str:
    """'swiftlite.obj.server' -> 'obj'; an entry module ('swiftlite.cli') -> its name."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_package_has_its_floor():
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert packages - set(ALLOWED) == set(), "say what a new package may import (ALLOWED)"


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_layering(package):
    bad = []
    for path in sorted((PACKAGE / package).rglob("*.py")):
        for mod in imports_of(path):
            top = package_of(mod)
            if top in ENTRY_MODULES:
                bad.append(f"{path.relative_to(ROOT)} imports the entry module {mod}")
            elif top not in (package, "") and top not in ALLOWED[package]:
                bad.append(f"{path.relative_to(ROOT)} imports {mod}")
    assert bad == []


# Inside common/: floor -> the floors it may import ("" is the primitives: the modules right
# under common/, and ec/).
COMMON_ALLOWED = {"": set(), "clients": {""}, "observe": {""},
                  "runtime": {"", "clients", "observe"}}


def _common_floor(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["swiftlite", "common"] or len(parts) < 3:
        return None
    return parts[2] if parts[2] in COMMON_ALLOWED else ""


def _floor_breaches(floor_of, allowed: dict[str, set[str]]) -> list[str]:
    """Imports between floors of one package that `allowed` does not list (`floor_of`: a
    module's floor, None outside the package)."""
    bad = []
    for mod, path in sorted(all_modules().items()):
        floor = floor_of(mod)
        if floor is None:
            continue
        for dep in imports_of(path):
            other = floor_of(dep)
            if other is not None and other != floor and other not in allowed[floor]:
                bad.append(f"{path.relative_to(ROOT)} imports {dep}")
    return bad


def _subpackages(package: str) -> set[str]:
    return {p.name for p in (PACKAGE / package).iterdir() if (p / "__init__.py").exists()}


def test_common_floors():
    assert _subpackages("common") - {"ec"} == set(COMMON_ALLOWED) - {""}
    assert _floor_breaches(_common_floor, COMMON_ALLOWED) == []


def _proxy_part(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["swiftlite", "proxy"] or len(parts) < 3:
        return None
    sub = PACKAGE / "proxy" / parts[2]
    return parts[2] if sub.is_dir() else ""


def test_proxy_floors():
    assert set(PROXY_ALLOWED) == {""} | _subpackages("proxy")
    assert _floor_breaches(_proxy_part, PROXY_ALLOWED) == []


def test_no_import_circle_anywhere():
    """Between any two modules, at any depth of the file (a function-level import closes a
    circle as surely as a top-level one, only later)."""
    modules = all_modules()
    # `from swiftlite.proxy import obj` names the module swiftlite.proxy.obj: that is the
    # dependency. The package counts too when a name it defines (not a module) is imported:
    # a package's own modules importing their siblings this way is no circle through it.
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for m, p in modules.items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Import):
                graph[m] |= {a.name for a in node.names if a.name in modules}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = {f"{node.module}.{a.name}" for a in node.names
                        if f"{node.module}.{a.name}" in modules}
                graph[m] |= subs
                if len(subs) < len(node.names) and node.module in modules:
                    graph[m].add(node.module)
        graph[m].discard(m)
    circles = _circles(graph)
    assert circles == [], circles


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, deps = work[-1]
            for dep in deps:
                if dep not in index:
                    index[dep] = low[dep] = len(index)
                    stack.append(dep)
                    on_stack.add(dep)
                    work.append((dep, iter(sorted(graph[dep]))))
                    break
                if dep in on_stack:
                    low[node] = min(low[node], index[dep])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        comp.append(m)
                        if m == node:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


ENGINE = "swiftlite.obj.engine"


def _engine_modules() -> set[str]:
    return {m for m in all_modules() if m.startswith(ENGINE + ".")}


def test_the_object_engine_loads_no_http_stack_and_nothing_above_it():
    loaded = loaded_after("import swiftlite.obj.engine\n" + "\n".join(
        f"import {m}" for m in sorted(_engine_modules())))
    assert under(loaded, "aiohttp") == set()
    above = {m for m in under(loaded, "swiftlite.obj") if not m.startswith(ENGINE)}
    assert above <= {"swiftlite.obj"}, above


def test_other_roles_use_only_the_object_engines_public_names():
    """Outside `obj/`, `from swiftlite.obj.engine import <name in __all__>` only; inside it,
    no name of an engine module that starts with `_`."""
    import swiftlite.obj.engine as engine

    inner = _engine_modules()
    bad = []
    for mod, path in sorted(all_modules().items()):
        if mod == ENGINE or mod in inner:
            continue
        other_role = not mod.startswith("swiftlite.obj.")
        aliases = set()
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                bad += [f"{mod} imports {a.name}" for a in node.names
                        if a.name.startswith(ENGINE)]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module in inner and other_role:
                    bad.append(f"{mod} imports {node.module}")
                elif node.module == ENGINE and other_role:
                    bad += [f"{mod} imports {a.name} (not in the engine's __all__)"
                            for a in node.names if a.name not in engine.__all__]
                if node.module in inner or node.module == ENGINE:
                    bad += [f"{mod} imports {node.module}.{a.name}" for a in node.names
                            if a.name.startswith("_")]
                    if node.module == ENGINE:
                        aliases |= {a.asname or a.name for a in node.names
                                    if f"{ENGINE}.{a.name}" in inner}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in aliases and node.attr.startswith("_") \
                    and not node.attr.startswith("__"):
                bad.append(f"{mod} uses {node.value.id}.{node.attr}")
    assert bad == []


def test_the_circle_finder_finds_one():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_storage_servers_parse_with_the_one_adapted_parser():
    """aiohttp's request parser is swapped in one place only, common/runtime/lenient_parser.py, by
    every server (make_app): the storage servers need its adaptations as much as the proxy
    does. (An older swap made REPLICATE parse; replication uses MERGE routes now.)"""
    code = """
import asyncio, os, secrets, tempfile
os.environ.setdefault("SWIFTLITE_BACKEND_SECRET", secrets.token_urlsafe(32))
from aiohttp import web_protocol
from swiftlite.common.runtime.lenient_parser import LenientRequestParser
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


SEAMS = {"swiftlite.common.runtime.aiohttp_seams", "swiftlite.common.runtime.lenient_parser"}
# Private attributes of aiohttp objects the servers have needed (all in aiohttp_seams now).
AIOHTTP_PRIVATE = {"_connections", "_request_handler", "_request_in_progress",
                   "_reading_paused", "_waiter"}


def test_aiohttp_internals_only_behind_the_seams():
    """No module but common/runtime/aiohttp_seams.py (and the parser built on aiohttp's)
    replaces an aiohttp module's global, reads a private attribute by name, or one of the
    aiohttp private attributes the servers use."""
    bad = []
    for mod, path in sorted(all_modules().items()):
        if mod in SEAMS:
            continue
        tree = ast.parse(path.read_text())
        aiohttp_names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("aiohttp"):
                aiohttp_names |= {a.asname or a.name for a in node.names}
            elif isinstance(node, ast.Import):
                aiohttp_names |= {(a.asname or a.name).split(".")[0] for a in node.names
                                  if a.name.startswith("aiohttp")}
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign | ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                bad += [f"{mod} sets {t.value.id}.{t.attr}" for t in targets
                        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                        and t.value.id in aiohttp_names]
            elif isinstance(node, ast.Attribute) and node.attr in AIOHTTP_PRIVATE:
                bad.append(f"{mod} uses .{node.attr}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id == "getattr" and len(node.args) >= 2 \
                    and isinstance(node.args[1], ast.Constant) \
                    and str(node.args[1].value) in AIOHTTP_PRIVATE:
                bad.append(f"{mod} reads {node.args[1].value}")
    assert bad == []
