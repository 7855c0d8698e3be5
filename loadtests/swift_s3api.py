#!/usr/bin/env python3
"""Put Swift's own `s3api` middleware into the running Swift anchor's proxy, for S3 A/B runs.

    python loadtests/swift_s3api.py [--anchor-dir /tmp/anchor-swift] [--no-check]
        [--memcache-max-connections N]
    python loadtests/swift_s3api.py --off      # back to the anchor's own pipeline

`../shared/anchors/swift/start.sh` writes `$ANCHOR_DIR/etc/proxy-server.conf` with Swift
2.38.3's default pipeline, which has no s3api. This rewrites that file with `s3api` right
before `tempauth` (Swift's documented order; with tempauth no s3token is needed) and a
`[filter:s3api]` section that sets nothing but `use`, so every s3api option keeps Swift's
default (`location = us-east-1`, `dns_compliant_bucket_names = true`, `s3_acl = false`,
path-style requests at the proxy's root). Then it restarts the proxy alone (by the pid in
`$ANCHOR_DIR/run/proxy.pid`, its workers too, as stop.sh does), records the new pid there so
stop.sh ends it, waits for /healthcheck, and checks with boto3 that a bucket, a PUT and a GET
work through S3 (access key `test:tester`, secret `testing`: tempauth's development user).

start.sh regenerates the config on every start, so after a restart of the anchor run this
again. The backends, rings and data are not touched.

`--memcache-max-connections N` also sets that option of the proxy's `cache` filter (Swift's
default is 2 per memcached server and worker, and a request that waits over 1 s for one
counts as a memcached error; 10 in 60 s and Swift skips memcached for 60 s, so tempauth
finds no tokens and answers 401). On a crowded 2-core machine a 32-deep load starves the
proxy's event loop enough for that: give it N = the concurrency. It only helps Swift.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
import uuid

ANCHOR_DIR = os.environ.get("ANCHOR_DIR", "/tmp/anchor-swift")
S3API_SECTION = """
[filter:s3api]
# Added by swiftlite's loadtests/swift_s3api.py; every option is Swift's default.
use = egg:swift#s3api
"""


def patch_conf(text: str, on: bool = True) -> str:
    """`text` (a proxy-server.conf) with s3api before tempauth in [pipeline:main], or without
    s3api at all when not `on`; the same text again when it already is so."""
    m = re.search(r"^\[pipeline:main\]\n(?:#.*\n)*pipeline = (.*)$", text, re.M)
    if m is None:
        raise SystemExit("proxy-server.conf has no [pipeline:main] pipeline line")
    stages = [s for s in m.group(1).split() if s != "s3api"]
    if on:
        if "tempauth" not in stages:
            raise SystemExit("the anchor's pipeline has no tempauth to put s3api before")
        stages.insert(stages.index("tempauth"), "s3api")
    text = text[:m.start(1)] + " ".join(stages) + text[m.end(1):]
    has_section = "[filter:s3api]" in text
    if on and not has_section:
        text = text.rstrip("\n") + "\n" + S3API_SECTION
    elif not on and has_section:
        text = text.replace(S3API_SECTION, "")
    return text


def set_memcache_max_connections(text: str, n: int | None) -> str:
    """`text` with `memcache_max_connections = n` in [filter:cache] (none: as it was)."""
    if n is None:
        return text
    m = re.search(r"^\[filter:cache\]\n(?:(?!\[).*\n)*", text, re.M)
    if m is None:
        raise SystemExit("proxy-server.conf has no [filter:cache] section")
    body = re.sub(r"^memcache_max_connections = .*\n", "", m.group(0), flags=re.M)
    body = body.rstrip("\n") + f"\nmemcache_max_connections = {n}\n\n"
    return text[:m.start()] + body + text[m.end():]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _children(pid: int) -> list[int]:
    r = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(x) for x in r.stdout.split()]


def stop_pid(pidfile: str) -> None:
    """The anchor server whose pid `pidfile` records, and its workers, stopped as stop.sh
    does: TERM, up to 15 s, then KILL."""
    if not os.path.exists(pidfile):
        return
    with open(pidfile) as f:
        pid = int(f.read().strip())
    if not _alive(pid):
        return
    pids = [pid, *_children(pid)]
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for p in pids:
        if _alive(p):
            os.kill(p, signal.SIGKILL)


def restart_proxy(anchor_dir: str, port: int = 16080, timeout: float = 60) -> int:
    """Stop the anchor's proxy (its recorded pid and that pid's workers), start it again on
    the current config; returns the new pid."""
    run, etc, logs = (os.path.join(anchor_dir, d) for d in ("run", "etc", "logs"))
    pidfile = os.path.join(run, "proxy.pid")
    stop_pid(pidfile)
    # The old listener may linger a moment: wait until the port stops answering.
    deadline = time.monotonic() + 15
    while _healthy(port) and time.monotonic() < deadline:
        time.sleep(0.1)
    with open(os.path.join(logs, "proxy.out"), "ab") as out:
        proc = subprocess.Popen(
            [os.path.join(anchor_dir, "venv", "bin", "swift-proxy-server"),
             os.path.join(etc, "proxy-server.conf")],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)  # like start.sh's setsid: survives this script
    with open(pidfile, "w") as f:
        f.write(f"{proc.pid}\n")
    deadline = time.monotonic() + timeout
    while not _healthy(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the proxy did not come back; see {logs}/proxy.out")
        time.sleep(0.2)
    return proc.pid


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthcheck", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def check_s3(endpoint: str, access_key: str = "test:tester", secret: str = "testing") -> None:
    """A bucket, a PUT and a GET through S3 with boto3 (SigV4, path style); raises if any fails
    or the body comes back different."""
    import boto3
    from botocore.config import Config

    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=access_key,
                      aws_secret_access_key=secret, region_name="us-east-1",
                      config=Config(s3={"addressing_style": "path"}, signature_version="s3v4",
                                    retries={"max_attempts": 1}))
    bucket, body = f"s3api-check-{uuid.uuid4().hex[:8]}", os.urandom(65536)
    s3.create_bucket(Bucket=bucket)
    try:
        s3.put_object(Bucket=bucket, Key="k", Body=body)
        got = s3.get_object(Bucket=bucket, Key="k")["Body"].read()
        if got != body:
            raise SystemExit(f"S3 GET at {endpoint} returned {len(got)} other bytes")
        s3.delete_object(Bucket=bucket, Key="k")
    finally:
        s3.delete_bucket(Bucket=bucket)
    print(f"s3 check OK at {endpoint}: create bucket, PUT, GET, DELETE (64 KiB)", flush=True)


def enable(anchor_dir: str = ANCHOR_DIR, on: bool = True, check: bool = True,
           memcache_max_connections: int | None = None) -> None:
    conf = os.path.join(anchor_dir, "etc", "proxy-server.conf")
    with open(conf) as f:
        text = f.read()
    m = re.search(r"^bind_port = (\d+)$", text, re.M)
    port = int(m.group(1)) if m else 16080
    new = set_memcache_max_connections(patch_conf(text, on), memcache_max_connections)
    if new != text:
        with open(conf, "w") as f:
            f.write(new)
        pid = restart_proxy(anchor_dir, port)
        print(f"proxy restarted (pid {pid}) with s3api {'on' if on else 'off'}", flush=True)
    else:
        print(f"proxy config already has s3api {'on' if on else 'off'}", flush=True)
    if on and check:
        check_s3(f"http://127.0.0.1:{port}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--anchor-dir", default=ANCHOR_DIR)
    p.add_argument("--off", action="store_true", help="take s3api out again")
    p.add_argument("--no-check", action="store_true", help="skip the boto3 PUT/GET check")
    p.add_argument("--memcache-max-connections", type=int,
                   help="also set the proxy's memcache_max_connections (Swift's default: 2)")
    a = p.parse_args()
    enable(a.anchor_dir, on=not a.off, check=not a.no_check,
           memcache_max_connections=a.memcache_max_connections)
    return 0


if __name__ == "__main__":
    sys.exit(main())
