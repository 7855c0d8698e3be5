"""The multi-host deployment files: example node configs, the README's ring commands,
deploy/make-cluster.sh, the compose file and the systemd units."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys

import pytest

from swiftlite.common import signing
from swiftlite.common.config import load_sections
from swiftlite.roles import DAEMONS

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
STORAGE_IPS = ["172.28.0.11", "172.28.0.12", "172.28.0.13"]
PORTS = {"object": 6200, "container": 6201, "account": 6202}


def ring_devices(path: str) -> set[tuple[str, int, str]]:
    from swiftlite.ring import Ring

    return {(d["ip"], d["port"], d["device"])
            for d in Ring.load(path, reload_interval=1e9).devs if d is not None}


def _example_with(tmp_path, name: str, **values: str) -> str:
    """etc/NAME with the given options replaced wherever they are set."""
    with open(os.path.join(REPO, "etc", name)) as f:
        text = f.read()
    for key, value in values.items():
        text = re.sub(rf"^{key} = .*$", f"{key} = {value}", text, flags=re.M)
    path = str(tmp_path / name)
    with open(path, "w") as f:
        f.write(text)
    return path


@pytest.mark.parametrize("name", ["storage-node.conf", "proxy-node.conf"])
def test_example_node_conf_refuses_its_placeholders(name, tmp_path):
    # Real salts, so what is refused is the placeholder secret.
    path = _example_with(tmp_path, name, hash_path_prefix=secrets.token_hex(8),
                         hash_path_suffix=secrets.token_hex(8))
    sections = load_sections(path)
    if name.startswith("storage"):
        # Every daemon `swiftlite node` can start, so the example runs a complete host.
        assert {"object-server", "container-server", "account-server"} <= set(sections)
        assert {section for _, _, section in DAEMONS.values()} <= set(sections)
        assert [sections[f"{r}-server"]["bind_port"] for r in PORTS] == ["6200", "6201", "6202"]
    else:
        assert "proxy-server" in sections
    res = subprocess.run([sys.executable, "-m", "swiftlite.cli", "node", "-c", path],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, signing.ENV: ""})
    assert res.returncode == 1, res.stderr
    assert "refusing to start" in res.stderr and "backend_secret" in res.stderr


@pytest.mark.parametrize("name", ["storage-node.conf", "proxy-node.conf"])
def test_example_node_conf_refuses_placeholder_hash_salts(name, tmp_path):
    path = _example_with(tmp_path, name, backend_secret=secrets.token_urlsafe(32),
                         auth_secret=secrets.token_urlsafe(32))
    res = subprocess.run([sys.executable, "-m", "swiftlite.cli", "node", "-c", path],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1, res.stderr
    assert "refusing to start" in res.stderr and "hash_path_prefix" in res.stderr


def readme_ring_block() -> str:
    """The README walkthrough's ring commands, without its secret generators."""
    block = next(b for b in re.findall(r"^```[a-z]*\n(.*?)^```", readme(), re.S | re.M)
                 if "swiftlite-ring-builder $kind.builder create" in b)
    return "\n".join(line for line in block.splitlines() if "python3 -c" not in line)


def readme() -> str:
    with open(os.path.join(REPO, "README.md")) as f:
        return f.read()


def builder(cwd, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([os.path.join(BIN, "swiftlite-ring-builder"), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def partitions_per_dev(path: str) -> dict[tuple[str, str], int]:
    """Partition-replicas each (ip, device) holds; asserts no partition has two replicas on
    one host."""
    from swiftlite.ring import Ring

    ring = Ring.load(path, reload_interval=1e9)
    held: dict[tuple[str, str], int] = {}
    for part in range(ring.partition_count):
        nodes = ring.get_part_nodes(part)
        ips = [d["ip"] for d in nodes]
        assert len(set(ips)) == len(ips) == 3, (part, ips)
        for d in nodes:
            held[d["ip"], d["device"]] = held.get((d["ip"], d["device"]), 0) + 1
    return held


def test_readme_ring_commands_build_three_rings(tmp_path):
    res = subprocess.run(["sh", "-ec", readme_ring_block()], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120,
                         env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"})
    assert res.returncode == 0, res.stderr
    for kind, port in PORTS.items():
        assert ring_devices(str(tmp_path / f"{kind}.ring.gz")) == {
            (f"10.0.0.1{n}", port, "d1") for n in (1, 2, 3)}


def test_readme_grow_and_shrink_commands(tmp_path):
    """The README's "Growing, shrinking" steps on the object ring of its walkthrough. Between
    two moves an operator waits `min_part_hours` (1); pretend_min_part_hours_passed stands
    in for that hour."""
    text = readme()
    add_host = "add r1z5-10.0.0.15:6200/d1 100 r1z5-10.0.0.15:6200/d2 100"
    add_disk = "add r1z1-10.0.0.11:6200/d2 100"
    for step in (add_host, add_disk, "set_weight 10.0.0.12 0", "remove 10.0.0.12"):
        assert f"`{step}" in text or f"object.builder {step}`" in text, step
    res = subprocess.run(["sh", "-ec", readme_ring_block()], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120,
                         env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"})
    assert res.returncode == 0, res.stderr
    ring = str(tmp_path / "object.ring.gz")

    # Grow: a two-disk host and a second disk on an existing host. Three new disks at once
    # need a second move to balance: rebalance says so (exit 1) and, after min_part_hours,
    # finishes.
    assert builder(tmp_path, "object.builder", "pretend_min_part_hours_passed").returncode == 0
    for step in (add_host, add_disk):
        res = builder(tmp_path, "object.builder", *step.split())
        assert res.returncode == 0, res.stderr
    res = builder(tmp_path, "object.builder", "rebalance")
    assert res.returncode == 0 or "balance not reached" in res.stdout, res.stdout + res.stderr
    assert builder(tmp_path, "object.builder", "pretend_min_part_hours_passed").returncode == 0
    res = builder(tmp_path, "object.builder", "rebalance")
    assert res.returncode == 0, res.stdout + res.stderr
    held = partitions_per_dev(ring)
    assert min(held[dev] for dev in [("10.0.0.15", "d1"), ("10.0.0.15", "d2"),
                                     ("10.0.0.11", "d2")]) > 400, held
    # Nothing may move again within min_part_hours: exit 1, the ring still written.
    res = builder(tmp_path, "object.builder", "rebalance")
    assert res.returncode == 1 and "No partitions could be reassigned" in res.stdout

    # Shrink: drain 10.0.0.12, then take it out.
    assert builder(tmp_path, "object.builder", "pretend_min_part_hours_passed").returncode == 0
    res = builder(tmp_path, "object.builder", "set_weight", "10.0.0.12", "0")
    assert res.returncode == 0, res.stderr
    res = builder(tmp_path, "object.builder", "rebalance")
    assert "Wrote object.ring.gz" in res.stdout, res.stdout + res.stderr
    assert not [dev for dev in partitions_per_dev(ring) if dev[0] == "10.0.0.12"]
    assert ("10.0.0.12", 6200, "d1") in ring_devices(ring)
    res = builder(tmp_path, "object.builder", "remove", "10.0.0.12")
    assert res.returncode == 0, res.stderr
    res = builder(tmp_path, "object.builder", "rebalance")
    assert res.returncode == 1 and "wrote the new device list" in res.stdout, res.stdout
    assert all(ip != "10.0.0.12" for ip, _, _ in ring_devices(ring))
    assert builder(tmp_path, "object.builder", "validate").returncode == 0


def test_make_cluster_writes_matching_configs_and_rings(tmp_path):
    out = tmp_path / "cluster"
    env = {**os.environ, "SWIFTLITE_BIN": BIN}
    script = os.path.join(REPO, "deploy", "make-cluster.sh")
    res = subprocess.run([script, str(out)], capture_output=True, text=True, timeout=120,
                         env=env)
    assert res.returncode == 0, res.stderr
    for kind, port in PORTS.items():
        assert ring_devices(str(out / f"{kind}.ring.gz")) == {
            (ip, port, "d1") for ip in STORAGE_IPS}
    confs = [load_sections(str(out / f"storage{n}.conf")) for n in (1, 2, 3)]
    proxy = load_sections(str(out / "proxy.conf"))["proxy-server"]
    secrets = {c["object-server"]["backend_secret"] for c in confs} | \
        {proxy["backend_secret"]}
    assert len(secrets) == 1
    signing.check_secret(secrets.pop())
    signing.check_secret(proxy["auth_secret"], "auth_secret")
    assert [c["object-server"]["bind_ip"] for c in confs] == STORAGE_IPS
    assert proxy["memcache_servers"] == "172.28.0.5:11211"
    assert proxy["user_images_uploader"].endswith(".admin")
    # One cluster's salts are never silently replaced.
    again = subprocess.run([script, str(out)], capture_output=True, text=True, timeout=60,
                           env=env)
    assert again.returncode == 2 and "already holds" in again.stderr


def test_compose_file_names_the_cluster_it_needs():
    yaml = pytest.importorskip("yaml")
    path = os.path.join(REPO, "deploy", "docker-compose.yml")
    with open(path) as f:
        compose = yaml.safe_load(f)
    services = compose["services"]
    assert set(services) == {"proxy", "storage1", "storage2", "storage3", "memcached"}
    for n, ip in enumerate(STORAGE_IPS, 1):
        svc = services[f"storage{n}"]
        assert svc["command"][:3] == ["swiftlite", "node", "-c"]
        assert svc["command"][3] == f"/etc/swiftlite/storage{n}.conf"
        assert svc["networks"]["backend"]["ipv4_address"] == ip
        assert f"storage{n}-d1:/srv/node/d1" in svc["volumes"]
        assert ip in " ".join(svc["healthcheck"]["test"])
    assert services["proxy"]["ports"] == ["8080:8080"]
    assert services["memcached"]["networks"]["backend"]["ipv4_address"] == "172.28.0.5"
    build = services["proxy"]["build"]
    assert os.path.exists(os.path.join(REPO, "deploy", build["context"], build["dockerfile"]))
    if shutil.which("docker") and subprocess.run(
            ["docker", "compose", "version"], capture_output=True).returncode == 0:
        res = subprocess.run(["docker", "compose", "-f", path, "config", "-q"],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("unit,conf", [("swiftlite-storage.service", "storage-node.conf"),
                                       ("swiftlite-proxy.service", "proxy-node.conf")])
def test_systemd_units_run_swiftlite_node(unit, conf):
    with open(os.path.join(REPO, "deploy", "systemd", unit)) as f:
        text = f.read()
    exec_start = re.search(r"^ExecStart=(.*)$", text, re.M).group(1)
    assert f"swiftlite node -c /etc/swiftlite/{conf}" in exec_start
    assert re.search(r"^KillSignal=SIGTERM$", text, re.M)
    assert re.search(r"^TimeoutStopSec=\d+$", text, re.M)
