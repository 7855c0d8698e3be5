"""`swiftlite up`: build rings and configs for an all-in-one cluster, start it, supervise it.

Layout under --root:
    etc/        swiftlite.conf ([hash]), proxy.conf, node<N>.conf, *.builder, *.ring.gz
                (every conf carries the cluster's generated backend_secret in [DEFAULT])
    node<N>/    that node's devices d1..dK (its `devices` root)
    meta/node<N>/  with --meta-devices M: its DB devices m1..mM (its `meta_devices` root),
                which the container and account rings list instead of d1..dK
    logs/       one log per process
    run/        daemon status files (see `swiftlite status`)
    cluster.json  proxy URL and per node its servers' ports, pids and command lines
Re-running `up` on the same root reuses the rings, configs and data.
"""

from __future__ import annotations

import configparser
import io
import ipaddress
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from argparse import Namespace
from importlib.util import find_spec
from typing import Any

from swiftlite.common import signing
from swiftlite.common.fsutil import atomic_write
from swiftlite.common.runtime.server import listen_socket
from swiftlite.common.runtime.supervisor import spawn, terminate
from swiftlite.proxy.pipeline import with_console

ROLES = ("account", "container", "object")
ROLE_OFFSET = {"object": 0, "container": 1, "account": 2}
DAEMONS = {  # daemon name -> module that must exist for it to be started
    "object-replicator": "swiftlite.obj.replicator",
    "object-reconstructor": "swiftlite.obj.reconstructor",  # with an EC policy only
    "object-updater": "swiftlite.obj.updater",
    "object-auditor": "swiftlite.obj.auditor",
    "object-expirer": "swiftlite.obj.expirer",
    "container-replicator": "swiftlite.db.replicator",
    "account-replicator": "swiftlite.db.replicator",
    "container-sharder": "swiftlite.container.sharder",
    "container-reconciler": "swiftlite.container.reconciler",
}
# Swift's all-in-one development users, with its well-known passwords. Those passwords are
# kept only while the proxy listens on loopback (the README's examples and Swift's functional
# suite use them): a proxy reachable from the network gets generated ones (`_secure_users`),
# as a known password there, a reseller admin's among them, is a working default credential.
USERS = {
    "user_test_tester": "testing .admin",
    "user_test_tester2": "testing2 .admin",
    "user_test_tester3": "testing3",
    "user_test2_tester2": "testing2 .admin",
    "user_test5_tester5": "testing5 service",
    "user_admin_admin": "admin .admin .reseller_admin",
    "user_admin_auditor": "admin_ro .reseller_reader",
}
# The development users' email addresses, for S3 grants by email (x-amz-grant-*:
# emailAddress=...), as ceph's s3-tests name them.
EMAILS = {
    "email_test_tester": "tester@example.com",
    "email_test2_tester2": "tester2@example.com",
    "email_test_tester2": "tester2@test.example.com",
}
# As Swift's functional-test setup: SERVICE_<account> needs the account's admin token plus a
# service token (X-Service-Token) of a user in group `service` (test5:tester5).
TEMPAUTH = {"reseller_prefix": "AUTH, SERVICE", "SERVICE_require_group": "service"}


# Ports picked for a new plan stay bound here until their servers inherit them: a port
# closed and reopened later could be taken in between (by a parallel test cluster, say).
_reserved: dict[tuple[str, int], socket.socket] = {}


def _free_port(ip: str, workers: int = 1) -> int:
    sock = listen_socket(ip, 0, reuse_port=workers > 1)
    port = sock.getsockname()[1]
    _reserved[(ip, port)] = sock
    return port


def _listener(ip: str, port: int, workers: int) -> socket.socket:
    """The socket a server is to inherit: reserved when the plan was made, else bound now."""
    sock = _reserved.pop((ip, port), None)
    return sock or listen_socket(ip, port, reuse_port=workers > 1)


def _ini(sections: dict[str, dict[str, Any]]) -> str:
    out = []
    for name, items in sections.items():
        out.append(f"[{name}]")
        out.extend(f"{k} = {v}" for k, v in items.items())
        out.append("")
    return "\n".join(out)


def parse_ec(spec: str) -> tuple[int, int]:
    """`--ec K+M` as (k, m); ValueError for anything else."""
    k, sep, m = spec.strip().partition("+")
    if not sep or not k.isdigit() or not m.isdigit() or int(k) < 1 or int(m) < 1:
        raise ValueError(f"--ec wants K+M (e.g. 4+2), not {spec!r}")
    return int(k), int(m)


def _policy_sections(extra: list[str], ec: dict[str, Any] | None = None,
                     ) -> dict[str, dict[str, Any]]:
    """swiftlite.conf's policies: none without extras (policy 0 alone, the default), else
    Policy-0 (the default), each extra name as a replicated policy 1, 2, ..., then `ec`
    (an erasure_coding section's keys) as the policy named "ec"."""
    if not extra and not ec:
        return {}
    out: dict[str, dict[str, Any]] = {
        "storage-policy:0": {"name": "Policy-0", "default": "yes",
                             "policy_type": "replication"}}
    for i, name in enumerate(extra, 1):
        out[f"storage-policy:{i}"] = {"name": name, "policy_type": "replication"}
    if ec:
        out[f"storage-policy:{len(extra) + 1}"] = {"name": "ec",
                                                   "policy_type": "erasure_coding", **ec}
    return out


def _ec_keys(args: Namespace) -> dict[str, Any] | None:
    """The EC policy's keys from `--ec K+M` (and its segment size and type), or None."""
    spec = getattr(args, "ec", None)
    if not spec:
        return None
    k, m = parse_ec(spec)
    if args.nodes * args.devices < k + m:
        raise ValueError(f"--ec {k}+{m} needs at least {k + m} devices (one per fragment "
                         f"archive); --nodes {args.nodes} --devices {args.devices} give "
                         f"{args.nodes * args.devices}")
    keys: dict[str, Any] = {"ec_num_data_fragments": k, "ec_num_parity_fragments": m}
    if getattr(args, "ec_type", None):
        keys["ec_type"] = args.ec_type
    if getattr(args, "ec_segment_size", None):
        keys["ec_object_segment_size"] = args.ec_segment_size
    if getattr(args, "ec_small", None):
        keys["small_object_policy"] = "Policy-0"
        keys["small_object_size"] = args.ec_small
    return keys


def _write(path: str, text: str, private: bool = False) -> None:
    """`private`: readable by its owner only (a config holding a secret)."""
    atomic_write(path, text.encode(), mode=None if private else 0o644, fsync=False)


def _read_conf(path: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keep key case
    parser.read(path)
    return parser


def _save_conf(path: str, parser: configparser.ConfigParser) -> None:
    """Replace a config (they all hold secrets: owner-only) with `parser`'s contents."""
    text = io.StringIO()
    parser.write(text)
    _write(path, text.getvalue(), private=True)


def _conf_paths(plan: dict[str, Any]) -> list[str]:
    """Every config of the root: each holds a secret (backend_secret, [hash], auth_secret)."""
    return [os.path.join(plan["etc_dir"], "swiftlite.conf"), plan["proxy_conf"],
            *(n["conf"] for n in plan["nodes"])]


def build(args: Namespace) -> dict[str, Any]:
    """Create rings and configs under args.root unless they exist; return the cluster plan."""
    from ringbuilder.builder import RingBuilder
    from swiftlite.ring import write_ring

    root = os.path.abspath(args.root)
    etc = os.path.join(root, "etc")
    plan_path = os.path.join(etc, "plan.json")
    # Storage servers sign and check each other's requests with this; SWIFTLITE_BACKEND_SECRET
    # lets several roots (or a test harness) share one.
    backend_secret = signing.check_secret(os.environ.get(signing.ENV) or
                                          secrets.token_urlsafe(32))
    if os.path.exists(plan_path):
        with open(plan_path) as f:
            plan = json.load(f)
        _add_backend_secret(plan, backend_secret)
        _add_kms_secret(plan)
        _add_daemon_sections(plan)
        _make_private(plan)
        return plan
    ec = _ec_keys(args)  # before anything is written: a bad --ec leaves no half-built root
    for d in ("etc", "logs", "run"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    # The proxy listens on --bind; storage servers on --backend-bind, private by default.
    backend_bind = getattr(args, "backend_bind", None) or "127.0.0.1"
    ring_ip = "127.0.0.1" if backend_bind in ("0.0.0.0", "::", "") else backend_bind
    proxy_ip = "127.0.0.1" if args.bind in ("0.0.0.0", "::", "") else args.bind
    random_ports = args.port == 0
    hash_conf = {"hash_path_prefix": secrets.token_hex(8),
                 "hash_path_suffix": secrets.token_hex(8)}
    extra_policies = [n.strip() for n in (getattr(args, "policies", "") or "").split(",")
                      if n.strip()]
    if ec and "ec" in (n.lower() for n in extra_policies):
        raise ValueError("--policies names ec, the name --ec gives its policy")
    _write(os.path.join(etc, "swiftlite.conf"),
           _ini({"hash": hash_conf, **_policy_sections(extra_policies, ec)}), private=True)
    # The proxy and the object servers carry every byte: one process per CPU each (an
    # object server is one GIL, and its replica writes queue behind it). Container and
    # account servers stay single: their SQLite group commit batches best in one process.
    workers = args.workers if args.workers is not None else (os.cpu_count() or 1)
    proxy_port = _free_port(args.bind, workers) if random_ports else args.port
    role_workers = {role: workers if role == "object" else 1 for role in ROLES}
    nodes = []
    for n in range(1, args.nodes + 1):
        ports = {role: (_free_port(backend_bind, role_workers[role]) if random_ports
                        else 6200 + 10 * n + off)
                 for role, off in ROLE_OFFSET.items()}
        devices_root = os.path.join(root, f"node{n}")
        for d in range(1, args.devices + 1):
            os.makedirs(os.path.join(devices_root, f"d{d}"), exist_ok=True)
        meta_root, meta_devs = _meta_layout(root, n, getattr(args, "meta_devices", 0))
        conf_path = os.path.join(etc, f"node{n}.conf")
        common = {"devices": devices_root, "mount_check": "false", "swift_dir": etc,
                  "bind_ip": backend_bind, "log_level": "INFO",
                  "backend_secret": backend_secret,
                  "status_dir": os.path.join(root, "run", f"node{n}")}
        if meta_root:
            common["meta_devices"] = meta_root
        sections: dict[str, dict[str, Any]] = {"DEFAULT": common, "hash": hash_conf}
        for role in ROLES:
            sections[f"{role}-server"] = {"bind_port": ports[role],
                                          "workers": role_workers[role]}
        sections["object-server"]["io_threads"] = 32  # room for group-commit batches
        for daemon in node_daemons(bool(ec)):
            sections[daemon] = {"interval": 30}
        if getattr(args, "shard_threshold", None):
            sections["container-sharder"]["shard_container_threshold"] = args.shard_threshold
        if getattr(args, "delay_reaping", None):
            sections["object-expirer"]["delay_reaping"] = args.delay_reaping
        _write(conf_path, _ini(sections), private=True)
        nodes.append({"name": f"node{n}", "ip": ring_ip, "zone": n, "ports": ports,
                      "bind": backend_bind, "workers": role_workers,
                      "devices_root": devices_root, "conf": conf_path,
                      "devices": [f"d{d}" for d in range(1, args.devices + 1)],
                      **({"meta_devices_root": meta_root, "meta_devices": meta_devs}
                         if meta_root else {})})
    proxy_conf = os.path.join(etc, "proxy.conf")
    # Every object server shares this host with the proxy: it reads their devices itself.
    local_reads = {} if getattr(args, "no_local_reads", False) else {
        "local_object_devices": " ".join(
            f"{_host(n['ip'])}:{n['ports']['object']}={n['devices_root']}" for n in nodes)}
    _write(proxy_conf, _ini({
        "DEFAULT": {"swift_dir": etc, "log_level": "INFO", "backend_secret": backend_secret},
        "hash": hash_conf,
        "proxy-server": {"bind_ip": args.bind, "bind_port": proxy_port, "workers": workers,
                         "auth_secret": secrets.token_hex(32), **TEMPAUTH, **USERS, **EMAILS,
                         # as Swift's all-in-one setup: expired objects readable on request
                         "allow_open_expired": "true", **local_reads,
                         # the web console at /console/ (off in a production config)
                         "pipeline": with_console()},
        # S3 SSE-KMS / SSE-S3 keys derive from this cluster's own random secret.
        "filter:s3api": {"kms_root_secret": secrets.token_urlsafe(32)},
    }), private=True)
    object_rings = [("object" if i == 0 else f"object-{i}", "object", args.replicas)
                    for i in range(len(extra_policies) + 1)]
    if ec:  # one replica per fragment archive, over the same devices
        object_rings.append((f"object-{len(extra_policies) + 1}", "object",
                             ec["ec_num_data_fragments"] + ec["ec_num_parity_fragments"]))
    for kind, role, replicas in (*object_rings, ("container", "container", args.replicas),
                                 ("account", "account", args.replicas)):
        builder = RingBuilder(args.part_power, replicas, 1)
        for node in nodes:
            # DBs live on the meta devices when the node has them; objects never do.
            devs = node["devices"] if role == "object" else \
                node.get("meta_devices") or node["devices"]
            for dev in devs:
                builder.add_dev({"region": 1, "zone": node["zone"], "ip": node["ip"],
                                 "port": node["ports"][role], "device": dev, "weight": 100.0})
        builder.rebalance(seed=1)
        builder.save(os.path.join(etc, f"{kind}.builder"))
        write_ring(os.path.join(etc, f"{kind}.ring.gz"), builder.get_ring_data())
    plan = {"root": root, "etc_dir": etc, "bind": args.bind, "proxy_ip": proxy_ip,
            "backend_bind": backend_bind,
            "proxy_port": proxy_port, "proxy_workers": workers, "proxy_conf": proxy_conf,
            "nodes": nodes,
            "daemons": not args.no_daemons}
    _write(plan_path, json.dumps(plan, indent=2))
    return plan


def _loopback(bind: str) -> bool:
    """Only this host can reach an address so bound ("0.0.0.0", a name: reachable)."""
    if bind == "localhost":
        return True
    try:
        return ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return False


def _secure_users(plan: dict[str, Any]) -> list[str]:
    """Give every user whose password is one of USERS' well-known ones a generated password
    when the proxy is reachable from the network (a new root's, and one made before this
    rule); returns the users changed. Nothing changes for a loopback proxy."""
    if _loopback(plan.get("bind") or "0.0.0.0"):
        return []
    known = {value.split()[0] for value in USERS.values()}
    parser = _read_conf(plan["proxy_conf"])
    section = parser["proxy-server"]
    changed = []
    for key in [k for k in parser.options("proxy-server") if k.startswith("user_")]:
        key_and_groups = section[key].split()
        if key_and_groups and key_and_groups[0] in known:
            key_and_groups[0] = secrets.token_urlsafe(18)
            section[key] = " ".join(key_and_groups)
            changed.append(key[len("user_"):])
    if changed:
        _save_conf(plan["proxy_conf"], parser)
    return changed


def _password(proxy_conf: str, user_key: str) -> str:
    """The password `user_key` (user_<account>_<user>) has in the proxy's config."""
    return _read_conf(proxy_conf).get("proxy-server", user_key, fallback="").split(" ", 1)[0]


def _host(ip: str) -> str:
    return f"[{ip}]" if ":" in ip else ip


def _meta_layout(root: str, n: int, count: int) -> tuple[str | None, list[str]]:
    """Node n's DB devices root and names (`<root>/meta/node<n>/m1..`), made now; none
    without --meta-devices."""
    if not count:
        return None, []
    meta_root = os.path.join(root, "meta", f"node{n}")
    names = [f"m{d}" for d in range(1, count + 1)]
    for name in names:
        os.makedirs(os.path.join(meta_root, name), exist_ok=True)
    return meta_root, names


def _add_backend_secret(plan: dict[str, Any], secret: str) -> None:
    """Give the configs of a root made before backend signing one shared backend_secret."""
    for path in [plan["proxy_conf"], *(n["conf"] for n in plan["nodes"])]:
        parser = _read_conf(path)
        if parser.defaults().get("backend_secret"):
            continue
        parser["DEFAULT"]["backend_secret"] = secret
        _save_conf(path, parser)


def _add_kms_secret(plan: dict[str, Any]) -> None:
    """Give the proxy config of a root made before S3 server-side encryption its own random
    kms_root_secret (SSE-KMS works out of the box, with no shared default)."""
    parser = _read_conf(plan["proxy_conf"])
    if parser.has_section("filter:s3api") and \
            parser.get("filter:s3api", "kms_root_secret", fallback=""):
        return
    if not parser.has_section("filter:s3api"):
        parser.add_section("filter:s3api")
    parser["filter:s3api"]["kms_root_secret"] = secrets.token_urlsafe(32)
    _save_conf(plan["proxy_conf"], parser)


def node_daemons(ec: bool) -> list[str]:
    """The daemons a node runs (and has a config section for): the object-reconstructor only
    where a storage policy is erasure-coded."""
    return [d for d in DAEMONS if ec or d != "object-reconstructor"]


def _has_ec_policy(plan: dict[str, Any]) -> bool:
    from swiftlite.common import policies
    return any(p.is_ec for p in policies.load(plan["etc_dir"]))


def _add_daemon_sections(plan: dict[str, Any]) -> None:
    """Give the node configs of a root made before a daemon existed (the object-expirer,
    say) that daemon's section, as a new root gets it."""
    for path in (n["conf"] for n in plan["nodes"]):
        parser = _read_conf(path)
        missing = [d for d in node_daemons(_has_ec_policy(plan)) if not parser.has_section(d)]
        if not missing:
            continue
        for d in missing:
            parser[d] = {"interval": "30"}
        _save_conf(path, parser)


def _make_private(plan: dict[str, Any]) -> None:
    """Configs of a root made before they were owner-only become so (each holds a secret)."""
    for path in _conf_paths(plan):
        if os.path.exists(path) and os.stat(path).st_mode & 0o077:
            os.chmod(path, 0o600)


def _plan_listener(ip: str | None, port: int, workers: int | None) -> socket.socket | None:
    """The listening socket for a planned server; None (it binds itself) for plans made
    before sockets were handed down, which do not record the worker counts."""
    if ip is None or workers is None:
        return None
    try:
        return _listener(ip, port, workers)
    except OSError as exc:
        raise SystemExit(f"swiftlite up: cannot listen on {ip}:{port}: {exc.strerror}") from None


def _healthy(ip: str, port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{ip}:{port}/healthcheck", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def run_up(args: Namespace) -> int:
    try:
        plan = build(args)
    except ValueError as exc:  # a bad --ec and the like: said plainly, no traceback
        print(f"swiftlite up: {exc}", file=sys.stderr)
        return 2
    root = plan["root"]
    renewed = _secure_users(plan)
    if renewed:
        print(f"swiftlite up: the proxy listens on {plan['bind']}, reachable from the network:"
              f" users {', '.join(renewed)} got generated passwords in place of the"
              f" well-known ones (see user_* in {plan['proxy_conf']})", file=sys.stderr)
    try:  # a stale cluster.json would tell tools a cluster is ready before it is
        os.unlink(os.path.join(root, "cluster.json"))
    except FileNotFoundError:
        pass
    logs = os.path.join(root, "logs")
    py = [sys.executable, "-m", "swiftlite.cli"]
    procs: dict[str, subprocess.Popen] = {}
    cluster: dict[str, Any] = {"root": root, "etc_dir": plan["etc_dir"], "nodes": []}
    checks: list[tuple[str, int]] = []
    for node in plan["nodes"]:
        entry: dict[str, Any] = {"name": node["name"], "ip": node["ip"],
                                 "devices_root": node["devices_root"], "conf": node["conf"],
                                 "servers": {}, "daemons": {}}
        if node.get("meta_devices_root"):
            entry["meta_devices_root"] = node["meta_devices_root"]
        for role in ROLES:
            cmd = py + ["server", role, "-c", node["conf"]]
            p = spawn(cmd, os.path.join(logs, f"{node['name']}-{role}.log"),
                       _plan_listener(node.get("bind"), node["ports"][role],
                                      node.get("workers", {}).get(role)))
            procs[f"{node['name']}-{role}"] = p
            entry["servers"][role] = {"port": node["ports"][role], "pid": p.pid, "cmd": cmd}
            checks.append((node["ip"], node["ports"][role]))
        if plan["daemons"]:
            for daemon in node_daemons(_has_ec_policy(plan)):
                if find_spec(DAEMONS[daemon]) is None:
                    continue
                cmd = py + ["daemon", daemon, "-c", node["conf"]]
                p = spawn(cmd, os.path.join(logs, f"{node['name']}-{daemon}.log"))
                procs[f"{node['name']}-{daemon}"] = p
                entry["daemons"][daemon] = {"pid": p.pid, "cmd": cmd}
        cluster["nodes"].append(entry)
    cmd = py + ["server", "proxy", "-c", plan["proxy_conf"]]
    p = spawn(cmd, os.path.join(logs, "proxy.log"),
               _plan_listener(plan["bind"], plan["proxy_port"], plan.get("proxy_workers")))
    procs["proxy"] = p
    url = f"http://{plan['proxy_ip']}:{plan['proxy_port']}"
    cluster["proxy"] = {"url": url, "auth_url": url + "/auth/v1.0", "port": plan["proxy_port"],
                        "pid": p.pid, "cmd": cmd}
    checks.append((plan["proxy_ip"], plan["proxy_port"]))

    stopping = False

    def stop(signum, frame) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    deadline = time.monotonic() + 60
    pending = list(checks)
    while pending and not stopping and time.monotonic() < deadline:
        pending = [c for c in pending if not _healthy(*c)]
        dead = [name for name, proc in procs.items() if proc.poll() is not None]
        if dead:
            print(f"swiftlite up: {', '.join(dead)} exited at start; see {logs}",
                  file=sys.stderr)
            terminate(procs)
            return 1
        if pending:
            time.sleep(0.1)
    if pending and not stopping:
        print(f"swiftlite up: servers not healthy after 60s: {pending}; see {logs}",
              file=sys.stderr)
        terminate(procs)
        return 1
    _write(os.path.join(root, "cluster.json"), json.dumps(cluster, indent=2))
    if not stopping:
        key = _password(plan["proxy_conf"], "user_test_tester")
        print(f"swiftlite is up: {cluster['proxy']['auth_url']}\n"
              f"  swift -A {cluster['proxy']['auth_url']} -U test:tester -K {key} stat\n"
              f"  web console: {cluster['proxy']['url']}/console/ (test:tester / {key})\n"
              f"  data and logs under {root}; Ctrl-C stops everything", flush=True)
    reported: set[str] = set()
    while not stopping:
        for name, proc in procs.items():
            if proc.poll() is not None and name not in reported:
                reported.add(name)  # a test may kill a node on purpose: report, don't respawn
                print(f"swiftlite up: {name} (pid {proc.pid}) exited with {proc.returncode}",
                      file=sys.stderr, flush=True)
        time.sleep(0.5)
    killed = terminate(procs)
    if killed:
        print(f"swiftlite up: killed {', '.join(killed)}: still running after SIGTERM",
              file=sys.stderr, flush=True)
    return 0


def run_status(args: Namespace) -> int:
    root = os.path.abspath(args.root)
    try:
        with open(os.path.join(root, "cluster.json")) as f:
            cluster = json.load(f)
    except FileNotFoundError:
        print(f"no cluster under {root} (run `swiftlite up --root {args.root}`)",
              file=sys.stderr)
        return 1
    from swiftlite.ops.headline import headline

    proxy = cluster["proxy"]
    proxy_ip = proxy["url"].split("//")[1].rsplit(":", 1)[0]
    up = _healthy(proxy_ip, proxy["port"])
    print(f"proxy  {proxy['url']}  {'up' if up else 'DOWN'}")
    for line in headline(proxy_ip, proxy["port"]) if up else []:
        print(f"  {line}")
    for node in cluster["nodes"]:
        states = [f"{role}:{'up' if _healthy(node['ip'], s['port']) else 'DOWN'}"
                  for role, s in node["servers"].items()]
        print(f"{node['name']}  " + "  ".join(states))
        for role in ("object", "container", "account"):
            server = node["servers"].get(role)
            for line in headline(node["ip"], server["port"]) if server else []:
                print(f"  {role} server: {line}")
        status_dir = os.path.join(root, "run", node["name"])
        for name in sorted(os.listdir(status_dir)) if os.path.isdir(status_dir) else []:
            if not name.endswith(".json"):
                continue
            try:
                with open(os.path.join(status_dir, name)) as f:
                    st = json.load(f)
            except (OSError, ValueError):
                continue
            fields = " ".join(f"{k}={v}" for k, v in st.items() if k != "daemon")
            print(f"  {name[:-5]}: {fields}")
    return 0
