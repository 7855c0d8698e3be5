"""Fixtures of the fault tests."""

from __future__ import annotations

import pytest

from tests.cluster import start_cluster


@pytest.fixture
def three_nodes(tmp_path):
    """A fresh cluster of three nodes (two devices each, three replicas) for one test."""
    c = start_cluster(str(tmp_path / "c"), nodes=3, devices=2, replicas=3, part_power=6)
    yield c
    c.stop()
