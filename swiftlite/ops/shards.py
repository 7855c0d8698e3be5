"""`swiftlite shards [--root DIR] ACCOUNT/CONTAINER [--json] [split|shrink]`: a container's
shard ranges, as its replicas on this machine's devices hold them.

Reads the root's DB replicas straight from disk (an all-in-one root, or any node config
with -c): the sharding state of each replica, and from the leading replica (the
partition's first primary, the one whose sharder works) every range with its state, row
count and, while sharding, how far the cleave has come (its name cursor).

Manual overrides, for the rare case the automatic policy gets it wrong:
- `split`: split the container now, whatever its size (`--rows-per-shard` rows each); the
  sharder cleaves it on its next pass (and, if it is under shrink_threshold, does not
  collapse it on its own).
- `shrink`: collapse a sharded container back into its root on the sharder's next pass.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from swiftlite.common.config import Section, load_config
from swiftlite.common.devices import meta_devices
from swiftlite.common.timestamp import Timestamp
from swiftlite.container.broker import ContainerBroker
from swiftlite.container.shard_ranges import ShardRange, State, live
from swiftlite.db.paths import db_file
from swiftlite.ring import Ring

SECTION = "container-sharder"


def _configs(args: argparse.Namespace) -> list[Section]:
    """One config per node whose devices are on this machine."""
    if args.config:
        return [load_config(args.config, SECTION if _has(args.config) else "DEFAULT")]
    root = os.path.abspath(args.root)
    with open(os.path.join(root, "etc", "plan.json")) as f:
        plan = json.load(f)
    return [load_config(n["conf"], SECTION if _has(n["conf"]) else "DEFAULT")
            for n in plan["nodes"]]


def _has(path: str) -> bool:
    with open(path) as f:
        return f"[{SECTION}]" in f.read()


def replicas(confs: list[Section], account: str, container: str,
             ) -> tuple[Ring, list[tuple[int, dict[str, Any], str | None]]]:
    """(ring, [(primary index, ring node, DB path here or None)])."""
    ring = Ring.from_conf(confs[0], "container")
    part, nodes = ring.get_nodes(account, container)
    out: list[tuple[int, dict[str, Any], str | None]] = []
    for i, node in enumerate(nodes):
        path = None
        for conf in confs:
            p = db_file(meta_devices(conf), node["device"], "container",
                        part, account, container)
            if _local(conf, node) and os.path.exists(p):
                path = p
        out.append((i, node, path))
    return ring, out


def _local(conf: Section, node: dict[str, Any]) -> bool:
    from swiftlite.common.runtime.daemon import server_address

    return server_address(conf, "container") == (node["ip"], node["port"])


def describe(path: str) -> dict[str, Any]:
    broker = ContainerBroker(path)
    try:
        info = broker.get_info()
        own, ranges = broker.get_ranges()
        progress = broker.get_progress()
    finally:
        broker.close()
    cursors = progress.get("cursors", {})
    return {
        "state": State(own.state).name.lower() if own else "unsharded",
        "object_count": info["object_count"],
        "db_rows": info.get("db_object_count", info["object_count"]),
        "progress": {k: v for k, v in progress.items() if k != "cursors"},
        "ranges": [{"name": r.name, "lower": r.lower, "upper": r.upper,
                    "state": State(r.state).name.lower(), "object_count": r.object_count,
                    "bytes_used": r.bytes_used,
                    "cleave_cursor": cursors.get(r.name)} for r in live(ranges)],
    }


def _act(args: argparse.Namespace, confs: list[Section], path: str) -> str:
    """The manual override on the leading replica; returns what was done."""
    import uvloop

    from swiftlite.common import signing
    from swiftlite.container.sharder import Sharder

    conf = next(c for c in confs if os.path.exists(path) and
                path.startswith(meta_devices(c)))
    signing.configure(conf)
    broker = ContainerBroker(path)
    info = broker.get_info()
    own, _ = broker.get_ranges()
    state = own.state if own else State.UNSHARDED
    sharder = Sharder(conf)
    if args.action == "split":
        if state not in (State.UNSHARDED, State.COLLAPSED):
            return f"not split: the container is {State(state).name.lower()}"
        if args.rows_per_shard:
            sharder.rows_per_shard = args.rows_per_shard

        async def split() -> int:
            await sharder.setup()
            try:
                _, ranges = await sharder.split(broker, info, manual=True)
                return len(ranges)
            finally:
                await sharder.teardown()

        n = uvloop.run(split())
        return f"split into {n} ranges; the sharder cleaves them on its next pass"
    if state != State.SHARDED:
        return f"not shrunk: the container is {State(state).name.lower()}"
    assert own is not None
    ts = Timestamp.now().internal
    broker.merge_ranges([ShardRange(**{**own.to_dict(), "state": int(State.SHRINKING),
                                       "state_timestamp": ts})])
    return "marked to collapse into its root on the sharder's next pass"


def run(args: argparse.Namespace) -> int:
    account, sep, container = args.path.partition("/")
    if not sep or not account or not container:
        print("swiftlite shards: give ACCOUNT/CONTAINER", file=sys.stderr)
        return 2
    confs = _configs(args)
    _, reps = replicas(confs, account, container)
    here = [(i, n, p) for i, n, p in reps if p]
    if not here:
        print(f"no replica of {args.path} on this machine's devices", file=sys.stderr)
        return 1
    lead_path = here[0][2]
    assert lead_path is not None
    done = _act(args, confs, lead_path) if args.action else None
    out = describe(lead_path)
    out["path"] = args.path
    out["replicas"] = [{"index": i, "device": f"{n['ip']}:{n['port']}/{n['device']}",
                        **({k: v for k, v in describe(p).items() if k in ("state",)}
                           | {"ranges": len(describe(p)["ranges"])} if p else
                           {"state": "not here"})} for i, n, p in reps]
    if done:
        out["action"] = done
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{args.path}: {out['state']}, {out['object_count']} objects")
    for rep in out["replicas"]:
        print(f"  replica {rep['index']} {rep['device']}: {rep['state']}"
              + (f", {rep['ranges']} ranges" if "ranges" in rep else ""))
    for r in out["ranges"]:
        cursor = f"  cleaved up to {r['cleave_cursor']!r}" if r["cleave_cursor"] and \
            r["state"] in ("found", "created") else ""
        print(f"  ({r['lower']!r}, {r['upper'] or 'end'!r}]  {r['state']:<9} "
              f"{r['object_count']:>10} objects  {r['name']}{cursor}")
    if out["progress"]:
        print(f"  progress: {out['progress']}")
    if done:
        print(done)
    return 0
