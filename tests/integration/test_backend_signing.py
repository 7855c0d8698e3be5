"""Storage servers answer only signed requests from the cluster; no server starts without a
usable secret; `swiftlite up --bind 0.0.0.0` keeps storage on loopback, and its users get
generated passwords instead of the well-known development ones.

Requests here are written by hand on a socket, so nothing signs them unless the test does
(see tests/backend_signing.py for the signing every other test gets).
"""

from __future__ import annotations

import configparser
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time

import pytest

from swiftlite.common import hashing, signing
from swiftlite.common.hashing import set_hash_path_affixes
from swiftlite.ring import Ring
from tests.backend_signing import SIGNER
from tests.helpers import free_port, wait_for

pytestmark = pytest.mark.xdist_group("backend_signing")
ATTACK_TS = "9999999999.00000"


def send(port: int, method: str, target: str, headers: dict[str, str],
         body: bytes = b"") -> tuple[int, bytes]:
    """One raw HTTP/1.1 request; (status, body)."""
    head = f"{method} {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    head += f"Content-Length: {len(body)}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head.encode() + body)
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    status = int(reply.split(b" ", 2)[1])
    return status, reply.partition(b"\r\n\r\n")[2]


def primaries(cluster, kind: str, *names: str) -> tuple[int, list[dict]]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(os.path.join(cluster.etc_dir, "swiftlite.conf"))
    # The affixes are process-wide: put back the ones other tests in this worker expect.
    saved = hashing._PREFIX, hashing._SUFFIX
    set_hash_path_affixes(parser.get("hash", "hash_path_prefix"),
                          parser.get("hash", "hash_path_suffix"))
    try:
        return Ring(os.path.join(cluster.etc_dir, f"{kind}.ring.gz")).get_nodes(*names)
    finally:
        hashing._PREFIX, hashing._SUFFIX = saved


def bad_signatures(method: str, target: str, ts: str) -> dict[str, dict[str, str]]:
    other = signing.Signer(secrets.token_urlsafe(32))
    now = time.time()
    return {
        "unsigned": {},
        "wrong secret": {signing.HEADER: other.sign(method, target, ts)},
        "stale": {signing.HEADER: SIGNER.sign(method, target, ts, now=now - 120)},
        "from the future": {signing.HEADER: SIGNER.sign(method, target, ts, now=now + 120)},
        "other path": {signing.HEADER: SIGNER.sign(method, target + "x", ts)},
        "other timestamp": {signing.HEADER: SIGNER.sign(method, target, "1.00000")},
        "garbage": {signing.HEADER: "12:zz"},
    }


@pytest.mark.parametrize("kind", ["object", "container", "account"])
def test_unsigned_or_bad_signature_is_refused_and_stores_nothing(cluster, conn, kind):
    """The X-Timestamp 9999999999 attack: planted straight on every primary, it would make
    every later write by the owner lose. Refused, the owner's write wins as usual."""
    account = "AUTH_test"
    cname, oname = f"sig-{kind}", "o"
    conn.put_container(cname)
    names = {"object": (account, cname, oname), "container": (account, cname + "-2"),
             "account": (account,)}[kind]
    part, nodes = primaries(cluster, kind, *names)
    body = b"planted by a stranger"
    for node in nodes:
        target = "/" + "/".join([node["device"], str(part), *names])
        for why, sig in bad_signatures("PUT", target, ATTACK_TS).items():
            headers = {"X-Timestamp": ATTACK_TS, "Content-Type": "text/plain", **sig,
                       "X-Account-Meta-Owner": "stranger", "X-Container-Meta-Owner": "stranger"}
            status, text = send(node["port"], "PUT", target, headers, body)
            assert status == (401 if why == "unsigned" else 403), (why, status, text)
        # Reading a private object is refused the same way.
        assert send(node["port"], "GET", target, {})[0] == 401
    # The owner's writes still land: nothing newer was planted.
    if kind == "object":
        conn.put_object(cname, oname, b"the owner's")
        assert conn.get_object(cname, oname)[1] == b"the owner's"
    elif kind == "container":
        conn.put_container(cname + "-2", headers={"X-Container-Meta-Owner": "owner"})
        assert conn.head_container(cname + "-2")["x-container-meta-owner"] == "owner"
    else:
        conn.post_account({"X-Account-Meta-Owner": "owner"})
        assert conn.head_account()["x-account-meta-owner"] == "owner"


def test_signed_request_is_served_and_healthcheck_open(cluster):
    """The same raw request, signed with the cluster's secret, reaches the handler."""
    part, nodes = primaries(cluster, "object", "AUTH_test", "nosuch", "o")
    node = nodes[0]
    target = f"/{node['device']}/{part}/AUTH_test/nosuch/o"
    ts = f"{time.time():016.5f}"
    assert send(node["port"], "HEAD", target, {signing.HEADER: SIGNER.sign("HEAD", target)})[0] \
        == 404
    assert send(node["port"], "DELETE", target,
                {"X-Timestamp": ts, signing.HEADER: SIGNER.sign("DELETE", target, ts)})[0] \
        == 404
    assert send(node["port"], "GET", "/healthcheck", {})[0] == 200


def _start(role: str, conf_text: str, tmp_path, env_secret: str | None = None,
           ) -> subprocess.CompletedProcess:
    conf = tmp_path / f"{role}.conf"
    conf.write_text(conf_text)
    env = {k: v for k, v in os.environ.items() if k != signing.ENV}
    if env_secret is not None:
        env[signing.ENV] = env_secret
    return subprocess.run([sys.executable, "-m", "swiftlite.cli", "server", role, "-c", str(conf),
                           "--port", str(free_port())], env=env, capture_output=True,
                          text=True, timeout=30)


GOOD = "k" + secrets.token_urlsafe(32)
SAMPLE_AUTH = "change-me-to-a-long-random-string"  # what etc/proxy-server.conf used to ship


@pytest.mark.parametrize("role", ["object", "container", "account", "proxy"])
@pytest.mark.parametrize("secret,why", [(None, "not set"), ("tooshort", "too short"),
                                        ("change-me-" + "x1y2z3" * 6, "sample")])
def test_server_refuses_to_start_without_a_usable_backend_secret(tmp_path, role, secret, why):
    devices = tmp_path / "devices"
    devices.mkdir()
    line = f"backend_secret = {secret}\n" if secret else ""
    text = f"[DEFAULT]\ndevices = {devices}\nswift_dir = {tmp_path}\n{line}" \
           f"[{role}-server]\nworkers = 1\nauth_secret = {GOOD}\n"
    r = _start(role, text, tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr[-2000:])
    assert "refusing to start" in r.stderr and "backend_secret" in r.stderr and why in r.stderr


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("secret,why", [(None, "not set"), ("short-secret", "too short"),
                                        (SAMPLE_AUTH, "sample")])
def test_proxy_refuses_to_start_without_a_usable_auth_secret(cluster, tmp_path, secret, why,
                                                             workers):
    """A token signed with a known auth_secret would be accepted as reseller admin."""
    line = f"auth_secret = {secret}\n" if secret else ""
    text = f"[DEFAULT]\nswift_dir = {cluster.etc_dir}\nbackend_secret = {GOOD}\n" \
           f"[proxy-server]\nworkers = {workers}\n{line}user_test_tester = testing .admin\n"
    r = _start("proxy", text, tmp_path)
    assert r.returncode in (2, 78), (r.returncode, r.stderr[-2000:])
    assert "refusing to start" in r.stderr and "auth_secret" in r.stderr and why in r.stderr


def test_sample_proxy_config_refuses_to_start_and_defines_no_users(cluster, tmp_path):
    sample = os.path.join(os.path.dirname(__file__), "..", "..", "etc", "proxy-server.conf")
    with open(sample) as f:
        text = f.read()
    assert not [ln for ln in text.splitlines() if ln.startswith("user_")]
    text = text.replace("swift_dir = /etc/swiftlite", f"swift_dir = {cluster.etc_dir}")
    # The placeholder salts are refused first (test_deploy_files); fill them in so the
    # auth_secret check is the one this test reaches.
    text = text.replace("changeme-prefix", "a" * 32).replace("changeme-suffix", "b" * 32)
    r = _start("proxy", text, tmp_path, env_secret=GOOD)
    assert r.returncode in (2, 78) and "auth_secret is not set" in r.stderr, r.stderr[-2000:]


def _listening(port: int) -> set[str]:
    """Local addresses (hex, as in /proc/net/tcp*) listening on `port`."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except FileNotFoundError:
            continue
        for row in rows:
            fields = row.split()
            addr, _, hexport = fields[1].rpartition(":")
            if fields[3] == "0A" and int(hexport, 16) == port:
                out.add(addr)
    return out


def test_up_with_public_bind_keeps_storage_on_loopback_and_known_passwords_off(tmp_path):
    root = tmp_path / "up"
    cmd = [sys.executable, "-m", "swiftlite.cli", "up", "--root", str(root), "--port", "0",
           "--bind", "0.0.0.0", "--devices", "1", "--replicas", "1", "--part-power", "2",
           "--workers", "1", "--no-daemons"]
    log_path = tmp_path / "up.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        path = root / "cluster.json"
        wait_for(lambda: proc.poll() is None and path.exists(), 60, what="cluster.json")
        info = json.loads(path.read_text())
        proxy_port = info["proxy"]["port"]
        assert _listening(proxy_port) == {"00000000"}
        for node in info["nodes"]:
            for role, s in node["servers"].items():
                assert _listening(s["port"]) == {"0100007F"}, role  # 127.0.0.1 only
        etc = info["etc_dir"]
        with open(os.path.join(etc, "node1.conf")) as f:
            assert "backend_secret = " in f.read()
        for name in ("proxy.conf", "node1.conf", "swiftlite.conf"):  # each holds a secret
            assert os.stat(os.path.join(etc, name)).st_mode & 0o077 == 0, name

        def auth(user: str, key: str) -> int:
            return send(proxy_port, "GET", "/auth/v1.0",
                        {"X-Auth-User": user, "X-Auth-Key": key})[0]

        # Swift's development passwords, the reseller admin's among them, work nowhere.
        for user, key in (("test:tester", "testing"), ("admin:admin", "admin"),
                          ("test:tester3", "testing3"), ("test5:tester5", "testing5")):
            assert auth(user, key) == 401, user
        conf = configparser.ConfigParser(interpolation=None)
        conf.read(os.path.join(etc, "proxy.conf"))
        key, groups = conf.get("proxy-server", "user_test_tester").split(" ", 1)
        assert groups == ".admin" and len(key) >= 20
        assert auth("test:tester", key) == 200
        wait_for(lambda: "swiftlite is up" in log_path.read_text(), 10, what="the banner")
        assert f"-U test:tester -K {key} stat" in log_path.read_text()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
