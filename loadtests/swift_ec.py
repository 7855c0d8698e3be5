#!/usr/bin/env python3
"""Give the running Swift anchor an erasure-coded storage policy `ec` like swiftlite's, for EC A/B.

    ../shared/anchors/swift/start.sh                  # the anchor, as usual
    .venv/bin/python loadtests/swift_ec.py [--anchor-dir /tmp/anchor-swift] [--ec 4+2]
        [--ec-type liberasurecode_rs_vand] [--segment-size 1048576] [--no-check]
        [--memcache-max-connections N]
    ../shared/anchors/swift/stop.sh                   # stops what this restarted too

What it does, on `$ANCHOR_DIR` (default /tmp/anchor-swift):

1. Adds `[storage-policy:1]` to `etc/swift.conf`: `name = ec`, `policy_type =
   erasure_coding`, `ec_type`, `ec_num_data_fragments`, `ec_num_parity_fragments` and
   `ec_object_segment_size`. Their defaults are swiftlite's own (`DEFAULT_EC_TYPE` and
   `DEFAULT_SEGMENT_SIZE` of swiftlite/common/ec/scheme.py, i.e. `liberasurecode_rs_vand`,
   1 MiB, and 4+2 as `swiftlite up --ec 4+2`), so both sides run the same scheme. Policy 0
   stays the default.
2. Builds `etc/object-1.ring.gz` (part power 10 like the anchor's other rings, replicas = k+m,
   one per fragment archive, min_part_hours 1) over k+m devices. The anchor has only 4
   devices (d1..d4, one per object server), so for 4+2 it adds device dirs d5 (`srv/1/d5`,
   zone 1, served by object server 1) and d6 (`srv/2/d6`, zone 2, object server 2): every
   fragment of an object lands on its own device, and object servers 1 and 2 hold two
   fragments of each object (as `swiftlite up --nodes 3 --devices 2 --ec 4+2` does). No new
   server process: stop.sh's list of pids stays complete. The ring is rebuilt only when it is
   missing or has another replica count or device list.
3. Restarts the proxy and every object, container and account server (not memcached or the
   log sink) with the policies read from that swift.conf, records their new pids in
   `run/*.pid` (so stop.sh ends them), and waits for each /healthcheck. Why the restart has
   a launcher of its own: Swift 2.38.3 takes only the hash prefix and suffix from the
   `swift_dir` it is given; its storage policies (and constraints) are parsed at import time
   from `/etc/swift/swift.conf` (absent here, so the anchor's servers see only the built-in
   Policy-0; start.sh says the same). Writing `/etc/swift/swift.conf` would change every
   Swift on this shared machine (and a started proxy refuses to run without each policy's
   ring), so instead each server runs as
   `python -c "<set swift.common.utils.SWIFT_CONF_FILE to etc/swift.conf, reload the storage
   policies and constraints, then swift.<type>.server.main()>" <conf>`: the same server
   `main()` as `swift-<type>-server`, with the policies from the anchor's own swift.conf.
4. Checks, unless `--no-check`, that `/info` lists the policy and that a container made with
   `X-Storage-Policy: ec` takes a PUT and a GET of a 3 MiB object (three segments, one
   partial) byte for byte, that its HEAD says `X-Storage-Policy: ec`, and that k+m fragment
   archives (`*#<index>#d.data`, Swift's durable EC files) of it are on disk; then deletes
   them.

Changing `--ec-type` or `--segment-size` rewrites the policy in place: objects the anchor
already holds under the old values no longer decode (Swift itself forbids such a change on a
policy with data). compare_swift_ec.py deletes its objects at the end of every run, so its
runs can switch schemes; `swift-ring-builder` and the device dirs are left as they are.

start.sh regenerates swift.conf (without policy 1) on every start, and RESET=1 deletes the
rings: after a restart of the anchor run this again. Run it after `swift_s3api.py` if both
are wanted: swift_s3api.py restarts the proxy with the stock `swift-proxy-server`, which
sees no ec policy. `--memcache-max-connections N` sets that option of the proxy's cache
filter as swift_s3api.py does (it only helps Swift: see there).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from swift_s3api import (  # noqa: E402
    _alive,
    _healthy,
    set_memcache_max_connections,
    stop_pid,
)

from swiftlite.common.ec.scheme import DEFAULT_EC_TYPE, DEFAULT_SEGMENT_SIZE  # noqa: E402

ANCHOR_DIR = os.environ.get("ANCHOR_DIR", "/tmp/anchor-swift")
POLICY_INDEX = 1
POLICY_NAME = "ec"
PART_POWER = 10
# The anchor's object servers: number -> port (start.sh: 160N0, devices under srv/N).
OBJECT_SERVERS = {n: 16000 + 10 * n for n in (1, 2, 3, 4)}
# Runs a Swift server's main() with the storage policies of the swift.conf given first.
LAUNCHER = (
    "import importlib, sys\n"
    "from swift.common import utils\n"
    "utils.SWIFT_CONF_FILE = sys.argv[1]\n"
    "from swift.common import constraints, storage_policy\n"
    "storage_policy.reload_storage_policies()\n"
    "constraints.reload_constraints()\n"
    "server = importlib.import_module(sys.argv[2])\n"
    "sys.argv = ['swift-' + sys.argv[2].split('.')[1] + '-server', *sys.argv[3:]]\n"
    "sys.exit(server.main())\n"
)


def policy_section(k: int, m: int, ec_type: str, segment_size: int) -> str:
    return (f"[storage-policy:{POLICY_INDEX}]\n"
            "# Added by swiftlite's loadtests/swift_ec.py: the scheme swiftlite runs with.\n"
            f"name = {POLICY_NAME}\n"
            "policy_type = erasure_coding\n"
            f"ec_type = {ec_type}\n"
            f"ec_num_data_fragments = {k}\n"
            f"ec_num_parity_fragments = {m}\n"
            f"ec_object_segment_size = {segment_size}\n")


def patch_swift_conf(text: str, section: str) -> str:
    """`text` (the anchor's swift.conf) with `section` as its storage-policy:1, replacing
    one that is there."""
    text = re.sub(rf"^\[storage-policy:{POLICY_INDEX}\]\n(?:(?!\[).*\n)*", "", text,
                  flags=re.M)
    m = re.search(r"^\[storage-policy:0\]\n(?:(?!\[).*\n)*", text, re.M)
    if m is None:
        raise SystemExit("the anchor's swift.conf has no [storage-policy:0]")
    body = m.group(0).rstrip("\n") + "\n\n"
    return text[:m.start()] + body + section + "\n" + text[m.end():]


def ring_devices(n: int) -> list[tuple[int, int, str]]:
    """(zone, port, device) for n devices: d1..d4 of the anchor's object servers, then d5,
    d6, ... on servers 1, 2, 3, 4, 1, ... (zone = server number)."""
    out = []
    for i in range(1, n + 1):
        server = (i - 1) % len(OBJECT_SERVERS) + 1
        out.append((server, OBJECT_SERVERS[server], f"d{i}"))
    return out


def build_ring(anchor_dir: str, replicas: int) -> bool:
    """object-1.ring.gz with `replicas` replicas over as many devices (device dirs made);
    False when the one there already is so."""
    etc, srv = os.path.join(anchor_dir, "etc"), os.path.join(anchor_dir, "srv")
    devs = ring_devices(replicas)
    for zone, _port, dev in devs:
        os.makedirs(os.path.join(srv, str(zone), dev), exist_ok=True)
    ring = os.path.join(etc, f"object-{POLICY_INDEX}.ring.gz")
    want = sorted(f"127.0.0.1:{port}/{dev}" for _zone, port, dev in devs)
    if os.path.exists(ring):
        have = _ring_summary(anchor_dir, ring)
        if have == {"replicas": replicas, "devices": want}:
            print(f"{ring}: already {replicas} replicas over {', '.join(want)}", flush=True)
            return False
    rb = os.path.join(anchor_dir, "venv", "bin", "swift-ring-builder")
    builder = os.path.join(etc, f"object-{POLICY_INDEX}.builder")
    for path in (builder, ring):
        if os.path.exists(path):
            os.unlink(path)
    subprocess.run([rb, builder, "create", str(PART_POWER), str(replicas), "1"], check=True,
                   stdout=subprocess.DEVNULL)
    for zone, port, dev in devs:
        subprocess.run([rb, builder, "add", f"r1z{zone}-127.0.0.1:{port}/{dev}", "100"],
                       check=True, stdout=subprocess.DEVNULL)
    # rebalance exits 1 with a warning on some layouts; the summary below is the check
    subprocess.run([rb, builder, "rebalance"], stdout=subprocess.DEVNULL)
    have = _ring_summary(anchor_dir, ring)
    if have != {"replicas": replicas, "devices": want}:
        raise SystemExit(f"{ring} came out as {have}, not {replicas} replicas over {want}")
    print(f"{ring}: built, {replicas} replicas over {', '.join(want)}", flush=True)
    return True


def _ring_summary(anchor_dir: str, ring: str) -> dict:
    code = ("import json, sys\nfrom swift.common.ring import RingData\n"
            "r = RingData.load(sys.argv[1])\n"
            "parts = {len(set(a[p] for a in r._replica2part2dev_id)) "
            "for p in range(len(r._replica2part2dev_id[0]))}\n"
            "print(json.dumps({'replicas': r.replica_count, 'devices': sorted("
            "f\"{d['ip']}:{d['port']}/{d['device']}\" for d in r.devs if d), "
            "'distinct': sorted(parts)}))\n")
    r = subprocess.run([os.path.join(anchor_dir, "venv", "bin", "python"), "-c", code, ring],
                       capture_output=True, text=True, check=True)
    got = json.loads(r.stdout)
    if got["distinct"] != [got["replicas"]]:
        # some partition has two fragments on one device: not the layout wanted
        return {**got, "note": "a partition repeats a device"}
    return {"replicas": got["replicas"], "devices": got["devices"]}


def servers(anchor_dir: str) -> list[tuple[str, str, str, int]]:
    """(pid name, module, config, port) of every server start.sh runs, proxy last."""
    etc = os.path.join(anchor_dir, "etc")
    out = []
    for n in OBJECT_SERVERS:
        for off, kind in enumerate(("object", "container", "account")):
            module = {"object": "swift.obj.server"}.get(kind, f"swift.{kind}.server")
            out.append((f"{kind}-{n}", module, os.path.join(etc, f"{kind}-server", f"{n}.conf"),
                        16000 + 10 * n + off))
    text = open(os.path.join(etc, "proxy-server.conf")).read()
    m = re.search(r"^bind_port = (\d+)$", text, re.M)
    out.append(("proxy", "swift.proxy.server", os.path.join(etc, "proxy-server.conf"),
                int(m.group(1)) if m else 16080))
    return out


def restart_all(anchor_dir: str, timeout: float = 60) -> None:
    """Every server of the anchor stopped (its recorded pid and that pid's workers), then
    started again through LAUNCHER with etc/swift.conf's policies; pids recorded."""
    run, logs = os.path.join(anchor_dir, "run"), os.path.join(anchor_dir, "logs")
    conf = os.path.join(anchor_dir, "etc", "swift.conf")
    py = os.path.join(anchor_dir, "venv", "bin", "python")
    todo = servers(anchor_dir)
    for name, _module, _conf, _port in reversed(todo):  # proxy first, as stop.sh
        stop_pid(os.path.join(run, f"{name}.pid"))
    for _name, _module, _conf, port in todo:
        deadline = time.monotonic() + 15
        while _healthy(port) and time.monotonic() < deadline:
            time.sleep(0.1)
    procs = []
    for name, module, server_conf, port in todo:
        with open(os.path.join(logs, f"{name}.out"), "ab") as out:
            proc = subprocess.Popen([py, "-c", LAUNCHER, conf, module, server_conf],
                                    stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        with open(os.path.join(run, f"{name}.pid"), "w") as f:
            f.write(f"{proc.pid}\n")
        procs.append((name, proc, port))
    deadline = time.monotonic() + timeout
    for name, proc, port in procs:
        while not _healthy(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{name} did not come back; see {logs}/{name}.out")
            time.sleep(0.2)
    print(f"restarted {len(procs)} servers with the policies of {conf}", flush=True)


def _launched(anchor_dir: str, name: str) -> bool:
    """Whether run/<name>.pid is alive and was started through LAUNCHER."""
    try:
        with open(os.path.join(anchor_dir, "run", f"{name}.pid")) as f:
            pid = int(f.read().strip())
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"SWIFT_CONF_FILE" in f.read()
    except (OSError, ValueError):
        return False


def _request(method: str, url: str, token: str | None = None, body: bytes | None = None,
             headers: dict | None = None) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url, data=body, method=method, headers=dict(headers or {}))
    if token:
        req.add_header("X-Auth-Token", token)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def check(anchor_dir: str, port: int, k: int, m: int, ec_type: str, segment_size: int) -> None:
    base = f"http://127.0.0.1:{port}"
    status, _h, body = _request("GET", f"{base}/info")
    pols = json.loads(body)["swift"]["policies"] if status == 200 else []
    # Swift's /info lists a policy's name and aliases only (not its type or EC values):
    # those are checked on disk below (k+m fragment archives of the object).
    if not any(p["name"] == POLICY_NAME for p in pols):
        raise SystemExit(f"/info lists no policy {POLICY_NAME}: {pols}")
    status, h, _ = _request("GET", f"{base}/auth/v1.0",
                            headers={"X-Auth-User": "test:tester", "X-Auth-Key": "testing"})
    if status // 100 != 2:
        raise SystemExit(f"auth answered {status}")
    token, url = h["X-Auth-Token"], h["X-Storage-Url"]
    cont, name = f"ec-check-{uuid.uuid4().hex[:8]}", "obj"
    data = os.urandom(3 * segment_size - 12345)
    steps = [("PUT container", _request("PUT", f"{url}/{cont}", token,
                                        headers={"X-Storage-Policy": POLICY_NAME}))]
    steps.append(("HEAD container", _request("HEAD", f"{url}/{cont}", token)))
    steps.append(("PUT object", _request("PUT", f"{url}/{cont}/{name}", token, data)))
    steps.append(("GET object", _request("GET", f"{url}/{cont}/{name}", token)))
    for what, (status, _h, _b) in steps:
        if status // 100 != 2:
            raise SystemExit(f"{what} in an {POLICY_NAME} container answered {status}")
    if steps[1][1][1].get("X-Storage-Policy") != POLICY_NAME:
        raise SystemExit(f"the container's HEAD says policy "
                         f"{steps[1][1][1].get('X-Storage-Policy')}")
    if steps[3][1][2] != data:
        raise SystemExit(f"GET returned {len(steps[3][1][2])} other bytes")
    time.sleep(1)  # the proxy answers at quorum (k+1); let the last fragment land
    frags = _fragments(anchor_dir)
    _request("DELETE", f"{url}/{cont}/{name}", token)
    _request("DELETE", f"{url}/{cont}", token)
    if frags != k + m:
        raise SystemExit(f"{frags} fragment archives on disk, not {k + m}")
    print(f"ec check OK at {base}: /info lists {POLICY_NAME} (swift.conf: {ec_type} {k}+{m}, "
          f"segment {segment_size}); container on it, PUT and GET of {len(data)} bytes byte "
          f"for byte, {frags} durable fragment archives on disk", flush=True)


def _fragments(anchor_dir: str) -> int:
    """Durable fragment archives written in the last minute under the ec data dirs."""
    now = time.time()
    paths = glob.glob(os.path.join(anchor_dir, "srv", "*", "*", f"objects-{POLICY_INDEX}",
                                   "*", "*", "*", "*#d.data"))
    return sum(1 for p in paths if now - os.path.getmtime(p) < 60)


def enable(anchor_dir: str = ANCHOR_DIR, ec: str = "4+2", ec_type: str = DEFAULT_EC_TYPE,
           segment_size: int = DEFAULT_SEGMENT_SIZE, do_check: bool = True,
           memcache_max_connections: int | None = None) -> None:
    k, m = (int(x) for x in ec.split("+"))
    etc = os.path.join(anchor_dir, "etc")
    proxy_pid = os.path.join(anchor_dir, "run", "proxy.pid")
    if not (os.path.exists(proxy_pid) and _alive(int(open(proxy_pid).read().strip()))):
        raise SystemExit(f"the anchor in {anchor_dir} is not running: start it first "
                         "(../shared/anchors/swift/start.sh)")
    conf = os.path.join(etc, "swift.conf")
    with open(conf) as f:
        text = f.read()
    new = patch_swift_conf(text, policy_section(k, m, ec_type, segment_size))
    changed = new != text
    with open(conf, "w") as f:
        f.write(new)
    if memcache_max_connections is not None:
        pconf = os.path.join(etc, "proxy-server.conf")
        with open(pconf) as f:
            ptext = f.read()
        pnew = set_memcache_max_connections(ptext, memcache_max_connections)
        changed = changed or pnew != ptext
        with open(pconf, "w") as f:
            f.write(pnew)
    changed = build_ring(anchor_dir, k + m) or changed
    if changed or not all(_launched(anchor_dir, name) for name, *_ in servers(anchor_dir)):
        restart_all(anchor_dir)
    else:
        print("swift.conf, proxy-server.conf and the ring unchanged, every server already "
              "runs with them: no restart", flush=True)
    if do_check:
        check(anchor_dir, servers(anchor_dir)[-1][3], k, m, ec_type, segment_size)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--anchor-dir", default=ANCHOR_DIR)
    p.add_argument("--ec", default="4+2", help="K+M (default 4+2, as swiftlite up --ec 4+2)")
    p.add_argument("--ec-type", default=DEFAULT_EC_TYPE,
                   help=f"pyeclib ec_type (default swiftlite's: {DEFAULT_EC_TYPE})")
    p.add_argument("--segment-size", type=int, default=DEFAULT_SEGMENT_SIZE,
                   help=f"ec_object_segment_size (default swiftlite's: {DEFAULT_SEGMENT_SIZE})")
    p.add_argument("--no-check", action="store_true", help="skip the PUT/GET check")
    p.add_argument("--memcache-max-connections", type=int,
                   help="also set the proxy's memcache_max_connections (Swift's default: 2)")
    a = p.parse_args()
    enable(a.anchor_dir, a.ec, a.ec_type, a.segment_size, not a.no_check,
           a.memcache_max_connections)
    return 0


if __name__ == "__main__":
    sys.exit(main())
