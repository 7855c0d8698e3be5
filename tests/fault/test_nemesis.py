"""The nemesis harness in CI: every fault, three seeds each, small sizes (tests/fault/nemesis).

Each case runs the image workload on a 3-node cluster while the fault is injected, then lets
the daemons converge the replicas, and fails if an acknowledged write was lost, a deleted
object came back, an acknowledged write was not on a quorum of disks when answered, a client
read bytes nobody wrote, a final read got no answer, the cluster hung, or the fault never
took effect; ReplicasDiverged if the replicas did not converge.

The runs of a worker share one cluster (each run uses its own containers and starts from a
healthy cluster with a fresh proxy); the two groups let `--dist loadgroup` give each worker
one. SWIFTLITE_NEMESIS_LOG=FILE appends each run's report as a JSON line
(`loadtests/soak.py --table FILE` prints the per-fault table).
"""

from __future__ import annotations

import os

import pytest

from tests.fault.nemesis import FAULTS, NemesisCluster, Sizes, run_fault

pytestmark = pytest.mark.slow

SEEDS = (0, 1, 2)
SIZES = Sizes()  # the defaults are CI-sized: ~10 s per run on 2 cores

# Faults whose runs are expected to fail, with the reason (empty: every fault is survived).
KNOWN: dict[str, pytest.MarkDecorator] = {}


def _cases() -> list:
    cases = []
    for i, (fault, seed) in enumerate((f, s) for f in FAULTS for s in SEEDS):
        marks = [pytest.mark.xdist_group(f"nemesis-{i % 2}")]
        if fault in KNOWN:
            marks.append(KNOWN[fault])
        cases.append(pytest.param(fault, seed, marks=marks, id=f"{fault}-{seed}"))
    return cases


@pytest.fixture(scope="module")
def nemesis_cluster(tmp_path_factory):
    nc = NemesisCluster.start(str(tmp_path_factory.mktemp("nemesis")))
    yield nc
    nc.stop()


@pytest.mark.parametrize("fault,seed", _cases())
def test_nemesis(nemesis_cluster: NemesisCluster, fault: str, seed: int) -> None:
    report = run_fault(nemesis_cluster, fault, seed, SIZES,
                       log_path=os.environ.get("SWIFTLITE_NEMESIS_LOG"))
    assert report.acked_writes >= 20, f"the workload hardly ran: {report.line()}"
    assert report.evidence, "the fault left no trace"
    report.check()
