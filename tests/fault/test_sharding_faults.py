"""Sharding under faults: the sharder killed (as kill -9 would) mid-cleave at several points,
or at each step of merging two small shards, resumes without losing a row; a container
node down while a container is sharded comes back and every replica of the root and of its
shards converges."""

from __future__ import annotations

import json
import random
from urllib.parse import quote

import pytest

from swiftlite.common.config import load_config
from swiftlite.container.sharder_base import EXIT_AFTER_ENV, EXIT_AT_ENV, MERGE_POINTS
from swiftlite.ring import Ring
from tests.helpers import http_request
from tests.sharding_support import (
    converge,
    listing_names,
    manual_split,
    put_many,
    run_daemon,
    run_threads,
    set_conf,
    sharding_cluster,
    shards,
    tiles,
)

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("sharding-faults")]


def churn(conn, container: str, model: dict[str, int], rnd: random.Random, n: int) -> None:
    """PUTs of new names all over the namespace, overwrites and DELETEs."""
    for _ in range(n):
        op = rnd.random()
        if op < 0.5 or not model:
            name = f"o{rnd.randrange(1000):04d}-{rnd.randrange(10**6)}"
            conn.put_object(container, name, b"n" * 3)
            model[name] = 3
        elif op < 0.8:
            name = rnd.choice(sorted(model))
            conn.delete_object(container, name)
            del model[name]
        else:
            name = rnd.choice(sorted(model))
            conn.put_object(container, name, b"ow")
            model[name] = 2


def test_sharder_killed_mid_cleave_resumes(tmp_path):
    c = sharding_cluster(str(tmp_path), batch=40)
    try:
        conn = c.connection()
        conn.put_container("kill")
        model = {f"o{i:04d}": 1 for i in range(0, 1000, 2)}  # 500 names
        put_many(c, "kill", model)
        manual_split(c, "AUTH_test/kill", 120)
        rnd = random.Random(7)
        seen_partial = 0
        for exit_after in (1, 3, 2, 4):
            rc = run_daemon(c, "container-sharder", env={EXIT_AFTER_ENV: str(exit_after)})
            state = shards(c, "AUTH_test/kill")
            if rc == 0:
                break
            assert rc == 9  # the test hook's abrupt exit, mid-cleave
            assert state["state"] == "sharding"
            cursors = [r["cleave_cursor"] for r in state["ranges"]]
            assert any(cursors)
            seen_partial += any(r["cleave_cursor"] and r["state"] == "created"
                                for r in state["ranges"])
            churn(conn, "kill", model, rnd, 40)  # writes between crashes
        assert seen_partial >= 2  # killed inside a range, not only between ranges
        assert run_daemon(c, "container-sharder") == 0
        assert shards(c, "AUTH_test/kill")["state"] == "sharded"
        churn(conn, "kill", model, rnd, 40)
        converge(c)
        names = listing_names(conn, "kill")
        assert names == sorted(model)
        _, rows = conn.get_container("kill", full_listing=True)
        assert {r["name"]: r["bytes"] for r in rows} == model
        assert int(conn.head_container("kill")["x-container-object-count"]) == len(model)
    finally:
        c.stop()


def replica_views(c, account: str, container: str) -> list[tuple[list, list]]:
    """Per replica: (its shard ranges, its own rows' names), asked of each container server
    directly."""
    conf = load_config(c.nodes[0]["conf"], "container-server")
    ring = Ring.from_conf(conf, "container")
    part, nodes = ring.get_nodes(account, container)
    out = []
    for n in nodes:
        path = f"/{n['device']}/{part}/{quote(account, safe='')}/{quote(container, safe='')}"
        base = f"http://{n['ip']}:{n['port']}"
        st, _, body = http_request(base, "GET", path, {"X-Backend-Record-Type": "shard"})
        assert st == 200, (st, body)
        ranges = sorted((r["name"], r["lower"], r["upper"], r["state"], r["deleted"])
                        for r in json.loads(body))
        st, _, body = http_request(base, "GET", path + "?format=json",
                                   {"X-Backend-Allow-Reserved-Names": "true"})
        assert st == 200, (st, body)
        out.append((ranges, [r["name"] for r in json.loads(body)]))
    return out


def test_node_down_while_sharding_converges(tmp_path):
    c = sharding_cluster(str(tmp_path), nodes=3, devices=1, batch=50)
    for node in c.nodes:  # shards of 80 rows: kept as split, not merged with a neighbour
        set_conf(node["conf"], "container-sharder", shrink_threshold=20)
    try:
        conn = c.connection()
        conn.put_container("down")
        model = {f"o{i:04d}": 1 for i in range(300)}
        put_many(c, "down", model)
        state = shards(c, "AUTH_test/down")
        lead_port = int(state["replicas"][0]["device"].split("/")[0].rsplit(":", 1)[1])
        ports = [n["servers"]["container"]["port"] for n in c.nodes]
        leader = ports.index(lead_port)
        victim = (leader + 1) % 3
        c.kill_node(victim, roles=["container"])
        manual_split(c, "AUTH_test/down", 80)
        assert run_daemon(c, "container-sharder", leader) == 0  # a quorum is enough
        assert shards(c, "AUTH_test/down")["state"] == "sharded"
        rnd = random.Random(3)
        churn(conn, "down", model, rnd, 60)  # the down node's updates go to async_pending
        c.start_node(victim, roles=["container"])
        converge(c)
        assert listing_names(conn, "down") == sorted(model)
        roots = replica_views(c, "AUTH_test", "down")
        assert roots[0][0] == roots[1][0] == roots[2][0]
        live_ranges = [r for r in roots[0][0] if not r[4] and not r[0].startswith("AUTH_test/")]
        assert len(live_ranges) >= 3 and all(r[3] == 40 for r in live_ranges)  # ACTIVE
        held = []
        for name, *_ in live_ranges:
            acct, cont = name.split("/", 1)
            views = replica_views(c, acct, cont)
            assert views[0][1] == views[1][1] == views[2][1], name
            held += views[0][1]
        assert sorted(held) == sorted(model)
    finally:
        c.stop()


def test_sharder_killed_at_each_merge_step_resumes(tmp_path):
    """Two neighbouring shards emptied by deletes are merged by a sharder killed at every
    step in turn, with updates into the merging range between kills: after each kill the
    listing is the model; the last pass finishes the merge and deletes the donor."""
    c = sharding_cluster(str(tmp_path), threshold=400, batch=20)
    try:
        conn = c.connection()
        conn.put_container("mk")
        model = {f"o{i:04d}": 1 for i in range(600)}
        put_many(c, "mk", model)
        manual_split(c, "AUTH_test/mk", 100)
        assert run_daemon(c, "container-sharder") == 0
        before = shards(c, "AUTH_test/mk")["ranges"]
        assert [r["upper"] for r in before] == ["o0099", "o0199", "o0299", "o0399", "o0499", ""]
        gone = [f"o{i:04d}" for i in range(200, 400) if i % 50]
        run_threads(lambda chunk: [c.connection().delete_object("mk", n) for n in chunk],
                    [gone[i::8] for i in range(8)])
        for n in gone:
            del model[n]
        rnd = random.Random(11)

        def check(step: str) -> None:
            _, rows = conn.get_container("mk", full_listing=True)
            got = {r["name"]: r["bytes"] for r in rows}
            assert len(rows) == len(got), f"a name listed twice after {step}"
            assert got == model, (step, set(got) ^ set(model))

        def churn_merging() -> None:
            """PUTs, overwrites and DELETEs in the two merging ranges."""
            for _ in range(30):
                mine = sorted(n for n in model if "o0199" < n <= "o0399")
                op = rnd.random()
                if op < 0.5 or not mine:
                    name = f"o{rnd.randrange(200, 399):04d}-{rnd.randrange(10**6)}"
                    conn.put_object("mk", name, b"n" * 3)
                    model[name] = 3
                elif op < 0.8:
                    name = rnd.choice(mine)
                    conn.delete_object("mk", name)
                    del model[name]
                else:
                    name = rnd.choice(mine)
                    conn.put_object("mk", name, b"ow")
                    model[name] = 2

        for point in MERGE_POINTS:
            assert run_daemon(c, "container-sharder", env={EXIT_AT_ENV: point}) == 9, point
            state = shards(c, "AUTH_test/mk")
            assert state["state"] == "sharded"
            assert tiles(state["ranges"]), point
            kinds = sorted(r["state"] for r in state["ranges"])
            if MERGE_POINTS.index(point) < MERGE_POINTS.index("merge-switched"):
                assert kinds == ["active"] * 5 + ["shrinking"], point  # `swiftlite shards`
            else:
                assert kinds == ["active"] * 5, point
            check(point)
            churn_merging()
        assert run_daemon(c, "container-sharder") == 0
        after = shards(c, "AUTH_test/mk")["ranges"]
        assert len(after) == 5 and tiles(after)
        donors = {r["name"] for r in before} - {r["name"] for r in after}
        assert len(donors) == 1
        acct, cont = donors.pop().split("/", 1)
        conf = load_config(c.nodes[0]["conf"], "container-server")
        part, nodes = Ring.from_conf(conf, "container").get_nodes(acct, cont)
        for n in nodes:  # gone from every replica (shrunk_grace 0)
            st, _, _ = http_request(f"http://{n['ip']}:{n['port']}", "HEAD",
                                    f"/{n['device']}/{part}/{quote(acct, safe='')}/"
                                    f"{quote(cont, safe='')}")
            assert st == 404
        check("the last pass")
        churn_merging()
        converge(c)
        check("converge")
        assert int(conn.head_container("mk")["x-container-object-count"]) == len(model)
    finally:
        c.stop()


def test_collapse_takes_over_a_merge_under_way(tmp_path):
    """The sharder killed just after a merge switched the root (the donor not yet told);
    then nearly everything is deleted: the root collapses, pulling the donor too (its
    range already left the root's table), and nothing is lost; the shards then go."""
    c = sharding_cluster(str(tmp_path), threshold=400, batch=50)
    try:
        conn = c.connection()
        conn.put_container("mc")
        model = {f"o{i:04d}": 1 for i in range(600)}
        put_many(c, "mc", model)
        manual_split(c, "AUTH_test/mc", 100)
        assert run_daemon(c, "container-sharder") == 0
        before = shards(c, "AUTH_test/mc")["ranges"]
        gone = [f"o{i:04d}" for i in range(200, 400) if i % 50]
        run_threads(lambda chunk: [c.connection().delete_object("mc", n) for n in chunk],
                    [gone[i::8] for i in range(8)])
        for n in gone:
            del model[n]
        assert run_daemon(c, "container-sharder", env={EXIT_AT_ENV: "merge-switched"}) == 9
        assert len(shards(c, "AUTH_test/mc")["ranges"]) == 5
        # Late updates into the donor (an object server's route cache still names it).
        late = [f"o{i:04d}-late" for i in range(200, 300, 10)]
        put_many(c, "mc", late, threads=2)
        model.update(dict.fromkeys(late, 1))
        rest = [n for n in model if n not in late and n not in ("o0250", "o0350")]
        run_threads(lambda chunk: [c.connection().delete_object("mc", n) for n in chunk],
                    [rest[i::8] for i in range(8)])
        for n in rest:
            del model[n]
        assert len(model) < 40  # under shrink_threshold
        assert run_daemon(c, "container-sharder") == 0
        assert run_daemon(c, "object-updater") == 0
        assert run_daemon(c, "container-sharder") == 0  # grace 0: the former shards go
        state = shards(c, "AUTH_test/mc")
        assert state["state"] == "collapsed" and state["ranges"] == []
        assert listing_names(conn, "mc") == sorted(model)
        assert int(conn.head_container("mc")["x-container-object-count"]) == len(model)
        conf = load_config(c.nodes[0]["conf"], "container-server")
        ring = Ring.from_conf(conf, "container")
        for r in before:
            acct, cont = r["name"].split("/", 1)
            part, nodes = ring.get_nodes(acct, cont)
            for n in nodes:
                st, _, _ = http_request(f"http://{n['ip']}:{n['port']}", "HEAD",
                                        f"/{n['device']}/{part}/{quote(acct, safe='')}/"
                                        f"{quote(cont, safe='')}")
                assert st == 404, r["name"]
    finally:
        c.stop()


def test_an_acceptor_past_the_threshold_mid_merge_waits_to_split(tmp_path):
    """A shard taking a merge's rows (copied, its range not grown yet) that crosses the
    threshold is not split then: its children would cover its old range only, and the
    donor's rows it holds would reach none of them. Once the merge has grown its range it
    splits over all of it, and no name is lost."""
    import asyncio
    from collections import defaultdict

    from swiftlite.common import signing
    from swiftlite.container.broker import ContainerBroker
    from swiftlite.container.sharder import Sharder
    from swiftlite.ops.shards import describe, replicas

    c = sharding_cluster(str(tmp_path), threshold=400, batch=50)
    try:
        conn = c.connection()
        conn.put_container("ma")
        model = {f"o{i:04d}": 1 for i in range(600)}
        put_many(c, "ma", model)
        manual_split(c, "AUTH_test/ma", 100)
        assert run_daemon(c, "container-sharder") == 0
        gone = [f"o{i:04d}" for i in range(200, 400) if i % 50]
        run_threads(lambda chunk: [c.connection().delete_object("ma", n) for n in chunk],
                    [gone[i::8] for i in range(8)])
        for n in gone:
            del model[n]
        assert run_daemon(c, "container-sharder", env={EXIT_AT_ENV: "merge-copied"}) == 9
        root = shards(c, "AUTH_test/ma")
        [merge] = root["progress"]["merges"].values()
        acceptor = next(r for r in root["ranges"] if r["name"] == merge["acceptor"])
        grown = [f"{acceptor['lower']}-x{i:04d}" for i in range(420)]  # inside its range
        put_many(c, "ma", grown)
        model.update(dict.fromkeys(grown, 1))

        conf = load_config(c.nodes[0]["conf"], "container-sharder")
        signing.configure(conf)
        acct, cont = merge["acceptor"].split("/", 1)
        path = next(p for _, _, p in replicas([conf], acct, cont)[1] if p)

        async def one_pass_over_the_acceptor() -> None:
            sharder = Sharder(conf)
            await sharder.setup()
            broker = ContainerBroker(path)
            try:
                await sharder.process(broker, defaultdict(int))
            finally:
                broker.close()
                await sharder.teardown()

        asyncio.run(one_pass_over_the_acceptor())
        state = describe(path)
        assert state["state"] == "active" and state["object_count"] > 400, state
        for _ in range(3):  # the merge ends, then the grown acceptor splits and retires
            assert run_daemon(c, "container-sharder") == 0
        converge(c)
        after = shards(c, "AUTH_test/ma")["ranges"]
        assert tiles(after) and merge["acceptor"] not in {r["name"] for r in after}
        assert listing_names(conn, "ma") == sorted(model)
    finally:
        c.stop()
