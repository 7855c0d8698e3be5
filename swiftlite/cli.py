"""The `swiftlite` command: run one server or daemon, or a whole all-in-one cluster."""

from __future__ import annotations

import argparse
import importlib
import sys

from swiftlite.common.config import load_config
from swiftlite.roles import DAEMONS, SERVERS


def cmd_server(args: argparse.Namespace) -> int:
    from swiftlite.common.runtime.server import serve

    module, factory, section = SERVERS[args.role]
    conf = load_config(args.config, section)
    if args.port is not None:
        conf["bind_port"] = str(args.port)
    app_factory = getattr(importlib.import_module(module), factory)
    # The proxy and object servers carry every byte: one process per CPU unless configured.
    default_workers = "auto" if args.role in ("proxy", "object") else "1"
    serve(app_factory, conf, f"{args.role}-server", default_workers)
    return 0


def cmd_daemon(args: argparse.Namespace) -> int:
    from swiftlite.common import signing
    from swiftlite.common.observe.logs import setup_logging

    module, entry, section = DAEMONS[args.name]
    conf = load_config(args.config, section)
    setup_logging(args.name, conf.get_str("log_level", "INFO"), conf.get("log_file"))
    signing.configure(conf)  # every daemon talks to storage servers, which refuse unsigned
    run = getattr(importlib.import_module(module), entry)
    return run(conf, once=args.once) or 0


def cmd_up(args: argparse.Namespace) -> int:
    from swiftlite.allinone import run_up

    return run_up(args)


def cmd_node(args: argparse.Namespace) -> int:
    from swiftlite.node import run_node

    return run_node(args)


def cmd_status(args: argparse.Namespace) -> int:
    if args.cluster or args.config:
        from swiftlite.ops.recon import run

        return run(args)
    from swiftlite.allinone import run_status

    return run_status(args)


def cmd_dispersion(args: argparse.Namespace) -> int:
    from swiftlite.ops.dispersion import run

    return run(args)


def cmd_shards(args: argparse.Namespace) -> int:
    from swiftlite.ops.shards import run

    return run(args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="swiftlite", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("server", help="run one server role")
    s.add_argument("role", choices=sorted(SERVERS))
    s.add_argument("-c", "--config", required=True)
    s.add_argument("--port", type=int, default=None, help="override bind_port")
    s.set_defaults(func=cmd_server)

    d = sub.add_parser("daemon", help="run one background daemon")
    d.add_argument("name", choices=sorted(DAEMONS))
    d.add_argument("-c", "--config", required=True)
    d.add_argument("--once", action="store_true", help="one pass, then exit")
    d.set_defaults(func=cmd_daemon)

    u = sub.add_parser("up", help="build and start an all-in-one cluster")
    u.add_argument("--root", default="./data", help="where rings, configs and data live")
    u.add_argument("--bind", default="127.0.0.1", help="address the proxy listens on")
    u.add_argument("--backend-bind", default="127.0.0.1",
                   help="address the storage servers listen on; keep it private "
                        "(they answer only signed requests from the cluster)")
    u.add_argument("--port", type=int, default=8080)
    u.add_argument("--nodes", type=int, default=1)
    u.add_argument("--devices", type=int, default=4, help="devices per node")
    u.add_argument("--meta-devices", type=int, default=0,
                   help="DB devices per node (container and account DBs apart from the "
                        "objects, under <root>/meta/; default 0: DBs on the object devices); "
                        "read when the root is first built")
    u.add_argument("--replicas", type=int, default=3)
    u.add_argument("--policies", default="",
                   help="names of extra replicated storage policies (comma-separated, e.g. "
                        "silver), indexes 1, 2, ...: each gets its own object ring over the "
                        "same devices; read when the root is first built")
    u.add_argument("--ec", default=None, metavar="K+M",
                   help="also an erasure-coded storage policy named ec (K data, M parity "
                        "fragments, e.g. 4+2), its ring of K+M replicas over the same devices "
                        "(at least K+M of them); read when the root is first built")
    u.add_argument("--ec-segment-size", type=int, default=None,
                   help="the ec policy's ec_object_segment_size (default 1 MiB)")
    u.add_argument("--ec-type", default=None,
                   help="the ec policy's ec_type (default liberasurecode_rs_vand)")
    u.add_argument("--ec-small", type=int, default=None, metavar="BYTES",
                   help="the ec policy keeps objects of at most BYTES in Policy-0 "
                        "(small_object_policy, small_object_size; off by default)")
    u.add_argument("--part-power", type=int, default=10)
    u.add_argument("--workers", type=int, default=None,
                   help="proxy and object server workers (default: CPUs)")
    u.add_argument("--no-daemons", action="store_true", help="start servers only")
    u.add_argument("--no-local-reads", action="store_true",
                   help="the proxy reads every replica through its object server, never "
                        "the local devices itself; read when the root is first built")
    u.add_argument("--shard-threshold", type=int, default=None,
                   help="rows past which the sharder splits a container (default 1,000,000)")
    u.add_argument("--delay-reaping", type=float, default=None,
                   help="seconds the object-expirer leaves expired objects on disk (readable "
                        "with X-Open-Expired, which this cluster allows; default 0)")
    u.set_defaults(func=cmd_up)

    n = sub.add_parser("node", help="run every server and daemon a config file names "
                                    "(one host of a multi-host cluster)")
    n.add_argument("-c", "--config", required=True)
    n.add_argument("--log-dir", default=None,
                   help="one log file per process here (default: this command's output)")
    n.add_argument("--no-daemons", action="store_true", help="start servers only")
    n.set_defaults(func=cmd_node)

    st = sub.add_parser("status", help="node and daemon status of an all-in-one cluster, or "
                                       "(--cluster) of every server in the rings")
    st.add_argument("--root", default="./data")
    st.add_argument("--cluster", action="store_true",
                    help="ask every storage server in the rings (GET /recon) and flag "
                         "problems; exit 1 when there are any")
    st.add_argument("-c", "--config", default=None,
                    help="--cluster: a config with swift_dir and backend_secret (e.g. the "
                         "proxy's); default: the --root's proxy config")
    st.add_argument("--timeout", type=float, default=3.0, help="--cluster: per server (s)")
    st.add_argument("--json", action="store_true", help="--cluster: JSON output")
    st.add_argument("--full-percent", type=float, default=90.0,
                    help="--cluster: a device fuller than this is a problem")
    st.add_argument("--pending-limit", type=int, default=1000,
                    help="--cluster: more async_pendings on a device than this is a problem")
    st.set_defaults(func=cmd_status)

    ds = sub.add_parser("dispersion", help="canary containers and objects, and a report "
                                           "of how many of their replicas are in place")
    ds.add_argument("action", choices=("populate", "report"))
    where = ds.add_mutually_exclusive_group()
    where.add_argument("-c", "--config", help="the proxy's config (rings, hash, secret)")
    where.add_argument("--root", help="an all-in-one root (`swiftlite up --root`)")
    ds.add_argument("--auth-url", default=None, help="default: from the config")
    ds.add_argument("--user", "-U", default=None,
                    help="account admin (default with --root: from its config)")
    ds.add_argument("--key", "-K", default=None)
    ds.add_argument("--coverage", type=float, default=1.0,
                    help="populate: percent of partitions to cover (at least 10 each); "
                         "report: how many canaries to expect if the account cannot say")
    ds.add_argument("--concurrency", type=int, default=32)
    ds.add_argument("--timeout", type=float, default=2.0,
                    help="report: seconds to connect to and hear from a storage server")
    ds.add_argument("--json", action="store_true", help="report: JSON instead of text")
    ds.set_defaults(func=cmd_dispersion)

    sh = sub.add_parser("shards", help="a container's shard ranges, their states and counts; "
                                       "manual split/shrink")
    sh.add_argument("path", metavar="ACCOUNT/CONTAINER")
    sh.add_argument("action", nargs="?", choices=("split", "shrink"), default=None,
                    help="split now (whatever the size), or collapse a sharded container")
    sh_where = sh.add_mutually_exclusive_group()
    sh_where.add_argument("--root", default="./data", help="an all-in-one root")
    sh_where.add_argument("-c", "--config", default=None, help="a storage node's config")
    sh.add_argument("--json", action="store_true")
    sh.add_argument("--rows-per-shard", type=int, default=None, help="split: rows per shard")
    sh.set_defaults(func=cmd_shards)

    from swiftlite.ops import s3keys  # stdlib only: cheap to import for every command
    s3keys.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    from swiftlite.common.signing import SecretError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except SecretError as exc:  # a missing or weak secret: refuse to start, say how to fix
        where = f" ({args.config})" if getattr(args, "config", None) else ""
        print(f"swiftlite: refusing to start{where}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
