"""Nemesis: a mixed image workload on a real cluster while a fault is injected, then checks.

Used by tests/fault/test_nemesis.py (small sizes, in CI) and loadtests/soak.py (long runs).

A run (`run_fault`) on a 3-node cluster (`NemesisCluster`: 2 devices per node, 3 replicas):
1. the workload (workload.py) PUTs, GETs, DELETEs and HEADs 1-64 KiB objects in a few
   containers and lists them, through the proxy; writes to one object never overlap, so
   the last acknowledged one is well defined; every acknowledged write must already be on
   disk on a quorum of devices when it is answered;
2. after `ops_before` operations the fault (faults.py) is injected, lasts `ops_during`
   operations (and its `min_seconds`), and is healed; `ops_after` more follow, for at least
   `after_seconds` (the proxy, restarted fresh for each run, skips a failing node for 2 s
   only, so healed nodes serve clients before they are repaired);
3. the replicas converge: the object replicator, updater and container replicator run one
   pass per node (nodes in parallel) until every object is the same on its primaries and on
   no handoff, every container replica lists exactly those objects, and no update is
   pending; or until two rounds change nothing, or the deadline (a fault may check its own
   mechanism first, e.g. that the updater alone delivers every saved update);
4. through the proxy: every object reads as its last acknowledged write left it, or as a
   later failed write did (it may have landed): else it was lost, or, deleted, it came back
   (resurrected); the listings match the objects.

`RunReport.check()` raises AssertionError for what clients see, ReplicasDiverged for
replicas that did not converge; `summarize` makes the per-fault table.
"""

from tests.fault.nemesis.cluster import NemesisCluster
from tests.fault.nemesis.faults import FAULTS
from tests.fault.nemesis.run import (
    ReplicasDiverged,
    RunReport,
    Sizes,
    load_reports,
    run_fault,
    summarize,
)

__all__ = ["FAULTS", "NemesisCluster", "ReplicasDiverged", "RunReport", "Sizes",
           "load_reports", "run_fault", "summarize"]
