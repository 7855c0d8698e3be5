"""Shared fixtures: a real all-in-one cluster per test module (real servers on loopback)."""

from __future__ import annotations

import pytest

from swiftlite.common import hashing
from tests import backend_signing
from tests.cluster import Cluster, start_cluster

backend_signing.install()  # storage servers answer only signed requests (see the module)


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
