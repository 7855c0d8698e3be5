"""The faults a nemesis run injects. Each one: inject (the workload is running), heal (still
running), cleanup (after the checks: leave the cluster as it was found). Each also records
evidence that it took effect, so a run cannot pass because the fault never happened."""

from __future__ import annotations

import os
import shutil
import signal
import time
import urllib.error
import urllib.request
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, ClassVar
from urllib.parse import unquote

from swiftlite.common.timestamp import Timestamp
from swiftlite.obj.engine import durability, hashdir
from tests.helpers import wait_for

if TYPE_CHECKING:
    from tests.fault.nemesis.run import Run

SKEW_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "skewed_clock")
SKEW_ENV = "SWIFTLITE_TEST_CLOCK_SKEW"  # read by skewed_clock/sitecustomize.py
UPLOAD_BURST = {"PUT": 0.85, "DELETE": 0.05, "GET": 0.1}


class Fault:
    name: ClassVar[str]
    during_ops: int | None = None  # operations it lasts (None: Sizes.ops_during)
    min_seconds = 0.0  # and at least this long
    during_mix: dict[str, float] | None = None  # the workload's mix while it lasts

    def __init__(self, run: Run) -> None:
        self.run = run
        self.node = run.rng.randrange(len(run.nc.nodes))

    def inject(self) -> None:
        raise NotImplementedError

    def heal(self) -> None:
        pass

    def before_converge(self) -> list[str]:
        """After the workload, before the daemon rounds; daemon failures, if it ran any."""
        return []

    def verify(self) -> None:
        """After convergence: fault-specific properties (problems go to the run)."""

    def cleanup(self) -> None:
        pass

    def node_name(self) -> str:
        return self.run.nc.nodes[self.node]["name"]


class KillNode(Fault):
    """kill -9 every server of one node, restart it later."""
    name = "kill9"

    def inject(self) -> None:
        self.run.nc.c.kill_node(self.node)  # waits until its ports are closed
        self.run.evidence.append(f"{self.node_name()} killed")

    def heal(self) -> None:
        self.run.nc.c.start_node(self.node)


class StopNode(Fault):
    """SIGSTOP one node (hung: connections are accepted, nothing is answered), then SIGCONT;
    it lasts past the proxy's node_timeout, so requests time out and go elsewhere."""
    name = "sigstop"
    during_ops = 0  # every request waits on it: the fault is measured in time

    def __init__(self, run: Run) -> None:
        super().__init__(run)
        self.min_seconds = 2 * run.nc.node_timeout

    def inject(self) -> None:
        self.run.nc.signal_node(self.node, signal.SIGSTOP)
        wait_for(lambda: self.run.nc.stopped(self.node), 10, what="the node to stop")
        self.run.evidence.append(f"{self.node_name()} stopped")

    def heal(self) -> None:
        self.run.nc.signal_node(self.node, signal.SIGCONT)


class FlushEIO(Fault):
    """One node's object server sees EIO from some of its group flushes (the durability
    layer's SWIFTLITE_FAIL_FLUSHES), as a failing disk reports writeback errors."""
    name = "flush-eio"

    def inject(self) -> None:
        rng = self.run.rng
        start = rng.randint(2, 6)
        failing = [n for n in range(start, start + 120) if rng.random() < 0.3]
        self.log = self.run.nc.log_path(f"{self.node_name()}-object")
        self.log_start = os.path.getsize(self.log)
        self.run.nc.restart(self.node, ("object",),
                            {durability.FAIL_ENV: ",".join(map(str, failing))})

    def verify(self) -> None:
        with open(self.log, errors="replace") as f:
            f.seek(self.log_start)
            fired = f.read().count("(injected: flush")
        if not fired:
            self.run.fault_problems.append("no injected flush failure fired")
        self.run.evidence.append(f"{fired} log lines of injected flush failures")

    def cleanup(self) -> None:
        self.run.nc.restart(self.node, ("object",))


class FullDevice(Fault):
    """ENOSPC on one device (hashdir's SWIFTLITE_FULL_DEVICES): its object server answers
    507 for it and the proxy writes to a handoff; freed later (restart without it)."""
    name = "enospc"

    def inject(self) -> None:
        node = self.run.nc.nodes[self.node]
        self.device = self.run.rng.choice(sorted(os.listdir(node["devices_root"])))
        self.run.nc.restart(self.node, ("object",), {hashdir.FULL_ENV: self.device})
        # Evidence: the object server refuses a write to that device with 507.
        port = node["servers"]["object"]["port"]
        req = urllib.request.Request(
            f"http://{node['ip']}:{port}/{self.device}/0/{self.run.account}/probe/probe",
            data=b"x", method="PUT",
            headers={"X-Timestamp": Timestamp.now().internal, "Content-Length": "1",
                     "Content-Type": "application/octet-stream"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                status = r.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        if status != 507:
            self.run.fault_problems.append(f"a PUT to the full device answered {status}")
        self.run.evidence.append(f"{self.node_name()}/{self.device} full (PUT: {status})")

    def heal(self) -> None:
        self.run.nc.restart(self.node, ("object",))


class ClockSkew(Fault):
    """One node's servers and daemons run with their wall clock 30 s ahead (even seeds) or
    behind (odd seeds), within the 60 s backend signature window; it stays skewed through
    convergence."""
    name = "clock-skew"

    def inject(self) -> None:
        self.skew = 30 if self.run.seed % 2 == 0 else -30
        path = os.pathsep.join(filter(None, [SKEW_DIR, os.environ.get("PYTHONPATH")]))
        env = {"PYTHONPATH": path, SKEW_ENV: str(self.skew)}
        self.run.nc.daemon_env[self.node] = env
        self.run.nc.restart(self.node, env=env)
        # Evidence: the node's servers date their answers by the skewed clock.
        node = self.run.nc.nodes[self.node]
        for role, s in node["servers"].items():
            with urllib.request.urlopen(f"http://{node['ip']}:{s['port']}/healthcheck",
                                        timeout=10) as r:
                off = parsedate_to_datetime(r.headers["Date"]).timestamp() - time.time()
            if abs(off - self.skew) > 3:
                self.run.fault_problems.append(f"{role} server clock off by {off:.0f}s, "
                                               f"not {self.skew}s")
        self.run.evidence.append(f"{self.node_name()} clock {self.skew:+d}s")

    def cleanup(self) -> None:
        self.run.nc.daemon_env.pop(self.node, None)
        self.run.nc.restart(self.node)


class ContainerDown(Fault):
    """One node's container server is down through a whole upload burst: object servers
    save their updates for it (async_pending) and the updater delivers them later. Before
    the replicas converge (the container replicator could fill the replica from its peers
    and hide an update the updater lost), the updater runs alone until the saved updates are
    gone, and each must then be in the DB it was meant for."""
    name = "container-down"
    during_mix = UPLOAD_BURST

    def inject(self) -> None:
        self.run.nc.c.kill_node(self.node, roles=("container",))

    def heal(self) -> None:
        pending = self.run.nc.pending_updates(self.run.prefixes())
        if not pending:
            self.run.fault_problems.append("no container update was saved for later")
        self.run.evidence.append(f"{pending} updates pending at restart")
        self.run.nc.c.start_node(self.node, roles=("container",))

    def before_converge(self) -> list[str]:
        run, nc = self.run, self.run.nc
        records = nc.pending_records(run.prefixes())
        failures = []
        for _ in range(5):  # a round delivers them all unless a container server fails
            failures += nc.daemon_round(("object-updater",))
            if not nc.pending_updates(run.prefixes()):
                break

        def undelivered() -> list[str]:
            out = []
            for rec in records:
                _, account, container, obj = [unquote(p) for p in rec["path"].split("/", 3)]
                for t in rec["targets"]:
                    rows = nc.container_rows(t, account, container)
                    if rows.get(obj, "") < rec["timestamp"]:
                        out.append(
                            f"update {rec['method']} {rec['path']} @{rec['timestamp']} for "
                            f"{t['port']}/{t['device']} not delivered by the updater (row: "
                            f"{rows.get(obj)})")
            return out

        # Read from the DB files: a container server may hold rows it acknowledged (in its
        # update log) for db_update_log_apply_delay before they are in the file.
        deadline = time.monotonic() + 10
        while (missing := undelivered()) and time.monotonic() < deadline:
            time.sleep(0.05)
        run.diverged += missing
        run.evidence.append(f"{len(records)} saved updates delivered")
        return failures


class CorruptDB(Fault):
    """One replica of a container DB is overwritten with garbage (its SQLite header) while
    its server is down; it must be quarantined and rebuilt from the other replicas."""
    name = "corrupt-db"

    def inject(self) -> None:
        run = self.run
        self.replica = run.rng.choice(run.nc.container_replicas(run.account,
                                                                run.containers[0]))
        self.node = self.replica["node"]
        run.nc.c.kill_node(self.node, roles=("container",))
        with open(self.replica["db"], "r+b") as f:
            f.write(run.rng.randbytes(4096))  # the header and the first page
        run.nc.c.start_node(self.node, roles=("container",))
        status = run.nc.replica_listing(self.replica["url"])[0]
        run.evidence.append(f"{run.containers[0]} replica on {self.node_name()} corrupted "
                            f"(GET: {status})")

    def verify(self) -> None:
        qdir = os.path.join(self.replica["dev_path"], "quarantined", "containers")
        quarantined = os.path.isdir(qdir) and any(
            n.startswith(self.replica["hash"]) for n in os.listdir(qdir))
        if not quarantined:
            self.run.diverged.append(f"the corrupt DB {self.replica['db']} was not "
                                     f"quarantined (nothing under {qdir})")

    def cleanup(self) -> None:
        # What an operator would do, so later runs on this cluster find it healthy: drop the
        # replica (the replicators make it anew from its peers).
        try:
            with open(self.replica["db"], "rb") as f:
                corrupt = not f.read(16).startswith(b"SQLite format 3")
        except FileNotFoundError:
            return
        if corrupt:
            self.run.nc.c.kill_node(self.node, roles=("container",))
            shutil.rmtree(os.path.dirname(self.replica["db"]))
            self.run.nc.c.start_node(self.node, roles=("container",))


FAULTS: dict[str, type[Fault]] = {f.name: f for f in (
    KillNode, StopNode, FlushEIO, FullDevice, ClockSkew, ContainerDown, CorruptDB)}
