"""swiftlite-migrate: upload a tree of files (or a manifest) into a Swift container.

    swiftlite-migrate SRC_DIR --url AUTH_URL --user U --key K --container C
        [--ring object.ring.gz [--conf swiftlite.conf]] [--order interleaved|partition|path]
        [--concurrency N] [--state FILE] [--prefix P] [--manifest FILE]

Exit status: 0 all files uploaded, 1 some failed, 2 usage/setup error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time

import aiohttp

from swiftlite.migrate.ordering import ORDERS, load_ring, order_items, place
from swiftlite.migrate.progress import Progress, human_bytes
from swiftlite.migrate.state import StateLog, StateMismatch, default_state_path
from swiftlite.migrate.swift_api import SwiftError, authenticate, ensure_container
from swiftlite.migrate.uploader import Credentials, Result, Uploader
from swiftlite.migrate.walker import read_manifest, walk_tree


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="swiftlite-migrate",
                                description="Bulk-upload files into a Swift container in ring "
                                            "order, resumably, verifying every ETag.")
    p.add_argument("src", metavar="SRC_DIR", help="directory whose files are uploaded")
    p.add_argument("--url", "-A", required=True, help="auth URL, e.g. http://host:8080/auth/v1.0")
    p.add_argument("--user", "-U", required=True)
    p.add_argument("--key", "-K", required=True)
    p.add_argument("--container", "-c", required=True)
    p.add_argument("--ring", help="the cluster's object.ring.gz (enables partition ordering)")
    p.add_argument("--conf", help="swiftlite.conf with the [hash] section "
                                  "(default: swiftlite.conf beside the ring)")
    p.add_argument("--order", choices=ORDERS, default="interleaved")
    p.add_argument("--concurrency", "-n", type=int, default=32)
    p.add_argument("--state", help="resume log (default: a file in the cwd named after SRC_DIR)")
    p.add_argument("--prefix", default="", help="prepended to every object name")
    p.add_argument("--manifest", help="file listing paths (relative to SRC_DIR), one per line")
    return p


def _print_summary(res: Result, elapsed: float, out=sys.stdout) -> None:
    el = max(elapsed, 1e-9)
    for f in res.failures:
        print(f"FAILED {f.path}: {f.reason}", file=out)
    status = "interrupted" if res.interrupted else "done"
    print(f"summary: {status}: uploaded {res.uploaded} objects, {res.bytes} bytes "
          f"({human_bytes(res.bytes)}) in {el:.1f}s: {res.uploaded / el:.1f} objects/s, "
          f"{human_bytes(res.bytes / el)}/s; skipped {res.skipped} already done; "
          f"failures {len(res.failures)}", file=out)


async def migrate(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    if not os.path.isdir(args.src):
        print(f"error: {args.src} is not a directory", file=sys.stderr)
        return 2
    if args.manifest:
        with open(args.manifest, encoding="utf-8", errors="surrogateescape") as f:
            items, failures = read_manifest(args.src, f, args.prefix)
    else:
        items, failures = walk_tree(args.src, args.prefix)

    state_path = args.state or default_state_path(args.src, args.container, args.prefix)
    try:
        state = StateLog(state_path, args.container, args.prefix)
    except StateMismatch as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    todo = [it for it in items if not state.is_done(it.name, it.size)]
    skipped = len(items) - len(todo)
    if skipped:
        print(f"resuming from {state_path}: {skipped} objects already uploaded",
              file=sys.stderr)

    conc = max(1, args.concurrency)
    connector = aiohttp.TCPConnector(limit=conc, keepalive_timeout=60)
    timeout = aiohttp.ClientTimeout(total=None, connect=10, sock_connect=10, sock_read=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout,
                                     auto_decompress=False) as session:
        creds = Credentials(args.url, args.user, args.key)
        try:
            auth = await authenticate(session, args.url, args.user, args.key)
            await ensure_container(session, auth, args.container)
        except (SwiftError, aiohttp.ClientError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            state.close()
            return 2

        order = args.order
        if args.ring:
            ring = load_ring(args.ring, args.conf)
            place(todo, ring, auth.account, args.container)
        elif order != "path":
            print(f"warning: no --ring: uploading in path order instead of {order}",
                  file=sys.stderr)
            order = "path"
        todo = order_items(todo, order)

        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        main_task = asyncio.current_task()

        def on_signal() -> None:
            if stop.is_set():
                main_task.cancel()  # second Ctrl-C: abandon in-flight uploads
                return
            stop.set()
            print("\ninterrupted: finishing in-flight uploads (Ctrl-C again to abort)",
                  file=sys.stderr)

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal)
        progress = Progress(len(todo), sum(it.size for it in todo))
        uploader = Uploader(session, creds, auth, args.container, state, progress)
        uploader.result.failures.extend(failures)
        progress.failed = len(failures)
        try:
            res = await uploader.run(todo, conc, stop)
        except asyncio.CancelledError:
            res = uploader.result
            res.interrupted = True
        finally:
            state.close()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
    res.skipped = skipped
    _print_summary(res, time.monotonic() - t0)
    if res.interrupted:
        return 130
    return 1 if res.failures else 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        import uvloop
    except ImportError:
        uvloop = None
    try:
        return uvloop.run(migrate(args)) if uvloop else asyncio.run(migrate(args))
    except KeyboardInterrupt:  # Ctrl-C while walking, before any upload started
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
