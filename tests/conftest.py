"""Shared fixtures: a real all-in-one cluster per test module (real servers on loopback)."""

from __future__ import annotations

import pytest

from swiftlite.common import hashing
from tests import backend_signing
from tests.cluster import Cluster, start_cluster

backend_signing.install()  # storage servers answer only signed requests (see the module)


# Module- or class-scoped fixtures of ours whose modules run on one xdist worker.
_SHARED_SCOPES = ("module", "class")


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]):
    """Before the other hooks: a module whose tests share a module- or class-scoped fixture
    of ours (a cluster, most often) becomes an xdist group of its own, so it runs on one
    worker; dealt test by test, both workers started each such module's cluster (~7
    CPU-seconds a start). Modules naming an xdist_group of their own keep it; tests with no
    such fixture (the unit tests) are still dealt one by one.

    After them (xdist's included): xdist 3.8 tells its scheduler a test's group by appending
    "@group" to the legacy `_nodeid` field, which pytest 9.2 no longer reads (the node id is
    the structured `_id`), so every group was silently dealt test by test (pytest-xdist
    issue #1386). Carry the suffix over where it was lost; a fixed xdist or an older pytest
    leaves nothing to do."""
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info is not None else ()
        if any(d[-1].scope in _SHARED_SCOPES and
               getattr(d[-1].func, "__module__", "").startswith("tests.") for d in defs):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    result = yield
    if getattr(config.option, "loadgroup", False):  # set on xdist's workers
        try:
            from _pytest.nodeid import NodeId
        except ImportError:  # pytest before 9.2: `_nodeid` is the node id
            return result
        for item in items:
            legacy = getattr(item, "_nodeid", None)
            if isinstance(legacy, str) and "@" in legacy and legacy != item.nodeid:
                item._id = NodeId.parse(legacy)
    return result


@pytest.fixture(autouse=True, scope="module")
def _keep_module_hash_affixes():
    """The same for a module's fixtures (a module-scoped cluster whose fixture loads its
    config for the module's tests): set up before them, so it saves the affixes from before
    the module and puts them back after it. Without it the function-scoped guard below saved
    the module's affixes as the ones to keep, and every later test of the worker computed
    hash dirs with the last module's salts (four fault tests found none of their files)."""
    saved = hashing._PREFIX, hashing._SUFFIX
    yield
    hashing._PREFIX, hashing._SUFFIX = saved


@pytest.fixture(autouse=True)
def _keep_hash_affixes():
    """Loading a node's config (load_config) sets this process's [hash] affixes; a test that
    does must not leave them to the next test of its xdist worker, which would then compute
    every object's hash dir wrongly (an object server test found no file it had just PUT)."""
    saved = hashing._PREFIX, hashing._SUFFIX
    yield
    hashing._PREFIX, hashing._SUFFIX = saved


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Cluster:
    c = start_cluster(str(tmp_path_factory.mktemp("cluster")), nodes=1, devices=4,
                      replicas=3, part_power=6)
    yield c
    c.stop()


@pytest.fixture
def conn(cluster):
    return cluster.connection()
