"""Running an aiohttp app on uvloop: middleware, request logging, workers on SO_REUSEPORT.

Every server role (proxy, object, container, account) is started through `serve`, so they
share one way of handling errors (logged with the request id, answered 5xx), one request log
line, one healthcheck and one way of forking workers.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
import os
import resource
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import uvloop
from aiohttp import web
from aiohttp.web_urldispatcher import UrlMappingMatchInfo

from swiftlite.common import signing, threadpool
from swiftlite.common.config import Section
from swiftlite.common.http import TXID, HTTPError, error, request_txid
from swiftlite.common.observe import metrics
from swiftlite.common.observe.logs import RequestLogger, setup_logging
from swiftlite.common.runtime import aiohttp_seams, lenient_parser, stall
from swiftlite.common.runtime.max_clients import ConnectionCap

AppFactory = Callable[[Section], web.Application | Awaitable[web.Application]]
log = logging.getLogger("swiftlite.server")
LISTEN_BACKLOG = 4096  # the kernel caps it at net.core.somaxconn
EX_CONFIG = 78  # sysexits.h: a worker found the configuration unusable
WORKER_STABLE_AFTER = 10.0  # a worker that lived this long is restarted without delay
# Run by `serve` before any worker is forked: state every worker must share (e.g. the
# proxy's info-cache stamp table in anonymous shared memory) is created here and inherited.
_before_fork: list[Callable[[Section], None]] = []


def before_fork(hook: Callable[[Section], None]) -> Callable[[Section], None]:
    """Register `hook(conf)` to run in the parent before workers fork (once per serve)."""
    if hook not in _before_fork:
        _before_fork.append(hook)
    return hook


@web.middleware
async def base_middleware(request: web.Request, handler):
    """Request id, /healthcheck, and the last line of defence: no exception escapes as a hang.

    Also callable as a plain function: `make_app(route=...)` wraps its one route with it
    instead of installing it as aiohttp middleware."""
    aiohttp_seams.request_state(request)[TXID] = request_txid(request.headers)
    if request.path == "/healthcheck":
        return web.Response(text="OK")
    if request.path == "/metrics" and metrics.enabled():
        if not metrics.allowed(request.remote):
            return error(403, "Forbidden")
        return web.Response(body=await threadpool.run_blocking(metrics.exposition),
                            content_type="text/plain", charset="utf-8",
                            headers={"Cache-Control": "no-store"})
    guard = stall.current()
    if guard is not None:
        guard.track(request)
    try:
        return await handler(request)
    except HTTPError as exc:
        return exc.response()
    except stall.ClientStalled:
        resp = error(408, "Request Timeout: the body stopped arriving")
        resp.force_close()  # the rest of the body may still come: this connection is done
        return resp
    except web.HTTPException:
        raise
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception:
        log.exception("%s %s failed, txid=%s", request.method, request.raw_path, request[TXID])
        return error(500, f"Internal Server Error (request {request[TXID]})")
    finally:
        if guard is not None:
            guard.untrack(request)


async def _last_touches(request: web.Request, response: web.StreamResponse) -> None:
    """The request id, and headers whose names are not ASCII (UTF-8 metadata names) moved
    after every other: Python's http.client (swiftclient, the `swift` CLI, requests) stops
    reading headers at the first such name (CPython gh-81274), and would lose the rest,
    Content-Length included, and then wait for the body's end until its timeout."""
    txid = aiohttp_seams.request_state(request).get(TXID)
    headers = response.headers
    if txid:
        headers["X-Trans-Id"] = txid
    if not "".join(headers).isascii():
        odd = [(k, v) for k, v in headers.items() if not k.isascii()]
        for k, _ in odd:
            headers.popall(k, None)
        for k, v in odd:
            headers.add(k, v)


def backend_auth_middleware(signer: signing.Signer):
    """Refuse, before any handler work, a request not signed by a member of the cluster.

    Installed after base_middleware, so /healthcheck stays open and the refusal is logged
    with the request's id."""
    header = signing.HEADER

    @web.middleware
    async def backend_auth(request: web.Request, handler):
        headers = request.headers
        value = headers.get(header)
        if value is None:
            return error(401, "Unsigned backend request")
        if not signer.verify(request.method, request.raw_path, headers.get("X-Timestamp"),
                             value):
            return error(403, "Bad or stale backend signature")
        return await handler(request)

    return backend_auth


# Every path, for a server's catch-all route. [\s\S]: a name may hold a newline (%0A), which
# ".*" would not match (the router's own 404: a proxy PUT of such a name found no replica).
ANY_PATH = r"/{tail:[\s\S]*}"

Expect = Callable[[web.Request], Awaitable[web.StreamResponse | None]]


def _expect_handler(expect: Expect) -> Expect:
    """aiohttp's handler of `Expect: 100-continue`, asking `expect` first: an answer it
    gives (a refusal) is sent instead of 100 Continue, before the client sends its body."""
    async def handler(request: web.Request) -> web.StreamResponse | None:
        if request.version < (1, 1):
            return None  # an HTTP/1.0 client sends its body without waiting
        value = request.headers.get("Expect", "")
        if value.lower() != "100-continue":
            raise web.HTTPExpectationFailed(text=f"Unknown Expect: {value}")
        aiohttp_seams.request_state(request)[TXID] = request_txid(request.headers)
        resp = await expect(request)
        if resp is not None:
            resp.force_close()  # the body it announced will not follow
            return resp
        # What aiohttp's own handler does (the interim answer is not the response's size).
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0
        return None
    return handler


def make_app(*, backend: bool = False,
             route: Callable[[web.Request], Awaitable[web.StreamResponse]] | None = None,
             expect: Expect | None = None, **kwargs) -> web.Application:
    """An aiohttp Application with the shared middleware installed.

    `backend=True` (storage servers) also requires every request to carry a valid backend
    signature; without a configured secret that raises SecretError and the server won't
    start. `route`: the app's only handler, for every method and path (the proxy), with
    base_middleware's work done in that route instead: aiohttp then runs no middleware chain
    at all, which was about 3% of the proxy's time on a cached GET. `expect`: asked before
    a request with `Expect: 100-continue` gets its 100 Continue (see _expect_handler)."""
    lenient_parser.install()  # requests as Swift's clients send them (see the module)
    signed = []
    if backend:
        signed = [backend_auth_middleware(signing.require())]
    middlewares = [*signed, *kwargs.pop("middlewares", [])]
    if route is None or middlewares:
        middlewares.insert(0, base_middleware)
        app = web.Application(middlewares=middlewares, client_max_size=8 * 1024**2, **kwargs)
        if route is not None:
            app.router.add_route("*", ANY_PATH, route, expect_handler=_expect_handler(expect)
                                 if expect is not None else None)
    else:
        app = web.Application(client_max_size=8 * 1024**2, **kwargs)

        async def guarded(request: web.Request) -> web.StreamResponse:
            return await base_middleware(request, route)

        only = app.router.add_route("*", ANY_PATH, guarded,
                                    expect_handler=_expect_handler(expect)
                                    if expect is not None else None)
        walk = app.router.resolve

        async def resolve(request: web.Request) -> UrlMappingMatchInfo:
            # The one route takes every path: the router's walk over the path's parts, which
            # cost about 3% of a cached GET, can only ever find it.
            if request.path.startswith("/"):
                return UrlMappingMatchInfo({}, only)
            return await walk(request)  # type: ignore[return-value]

        app.router.resolve = resolve  # type: ignore[method-assign]
    app.on_response_prepare.append(_last_touches)
    return app


# `swiftlite up` binds each server's port itself and hands the listening socket down under
# this variable, so a port it picked can never be taken by another process in between.
LISTEN_FD_ENV = "SWIFTLITE_LISTEN_FD"


def inherited_socket() -> socket.socket | None:
    fd = os.environ.pop(LISTEN_FD_ENV, None)
    if not fd:
        return None
    sock = socket.socket(fileno=int(fd))
    sock.setblocking(False)
    return sock


def listen_socket(ip: str, port: int, reuse_port: bool) -> socket.socket:
    """A listening socket. SO_REUSEPORT only for a server's own workers: on a single-process
    server it would let another process bind the same port and silently take half its
    traffic; without it such a clash fails loudly."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((ip, port))
    sock.listen(LISTEN_BACKLOG)
    sock.setblocking(False)
    return sock


class StartupFailed(Exception):
    """A worker could not build its app (no rings, a bad option): every restart would fail the
    same way, so the server stops with EX_CONFIG instead of respawning it in a loop."""


async def _run(factory: AppFactory, conf: Section, name: str, sock: socket.socket) -> None:
    try:
        app = factory(conf)
        if inspect.isawaitable(app):
            app = await app
    except signing.SecretError:
        raise
    except Exception as exc:
        raise StartupFailed(f"{type(exc).__name__}: {exc}") from exc
    runner = web.AppRunner(
        app,
        handle_signals=False,
        access_log_class=RequestLogger,
        access_log=logging.getLogger(f"{name}.access"),
        auto_decompress=False,  # object bodies are stored exactly as sent
        max_field_size=conf.get_int("max_header_size", 8192) + 64,
        max_line_size=conf.get_int("max_line_size", 16384),
        keepalive_timeout=conf.get_float("keepalive_timeout", 75.0),
        # What is still running after the drain below is cancelled this soon.
        shutdown_timeout=0.5,
    )
    await runner.setup()
    # Every server, storage ones too: their client is a proxy that may hang mid-request.
    guard = stall.StallGuard(conf.get_float("client_timeout", 60.0))
    stall.install(guard)
    assert runner.server is not None
    sweeper = asyncio.get_running_loop().create_task(guard.run(runner.server))
    ConnectionCap(runner.server, max_clients(conf, name)).install()
    # aiohttp listens again with its own backlog (128 by default): under a burst of new
    # connections a full accept queue drops SYNs, and each costs the client a 1 s retransmit.
    site = web.SockSite(runner, sock, backlog=LISTEN_BACKLOG)
    await site.start()
    # What start-up built (rings, configs, the app) lives as long as the process: out of the
    # collector's sight, a full collection walks ~1.7k objects instead of ~42k. It took
    # 17 ms of the event loop each time, about once a second under 64 KiB PUTs.
    gc.freeze()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info("%s listening on %s:%s", name, *sock.getsockname()[:2])
    await stop.wait()
    # SIGTERM: no new connections, then requests in flight get `graceful_shutdown_timeout`
    # seconds to finish, uploads included (aiohttp's own shutdown stops reading request
    # bodies at once), then whatever is left is cut: a stop is bounded whatever a client does.
    await site.stop()
    await _drain(runner.server, conf.get_float("graceful_shutdown_timeout", 2.0))
    sweeper.cancel()
    stall.install(None)
    await runner.cleanup()


async def _drain(server: Any, grace: float) -> None:
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(
            aiohttp_seams.in_request(conn) for conn in server.connections):
        await asyncio.sleep(0.05)


def _worker(factory: AppFactory, conf: Section, name: str, sock: socket.socket) -> None:
    threadpool.configure(conf.get_int("io_threads", 8))
    metrics.init()
    uvloop.run(_run(factory, conf, name, sock))


def worker_count(conf: Section, default: str = "1") -> int:
    """`workers` from the config: a number, or `auto` for one per CPU."""
    raw = (conf.get("workers") or default).strip().lower()
    if raw == "auto":
        return os.cpu_count() or 1
    return int(raw)


def max_clients(conf: Section, name: str) -> int:
    """`max_clients` per process (0: no cap), at most a quarter of the open-files limit: the
    rest stays for backend connections, files and DBs. The proxy's default is Swift's, 1024.
    A storage server's clients are proxies keeping pools of idle connections (up to
    `backend_connections_per_host` per worker each), which should rarely be shed: 8192."""
    wanted = conf.get_int("max_clients", 1024 if name == "proxy-server" else 8192)
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if wanted <= 0 or soft == resource.RLIM_INFINITY:
        return max(0, wanted)
    return max(1, min(wanted, soft // 4))


def raise_fd_limit(wanted: int = 65536) -> int:
    """Lift the soft open-files limit toward the hard one (up to `wanted`); returns it.

    A server holds a socket per client and per pooled backend connection, plus files and
    hash-dir locks per write in flight: the usual soft limit of 1024 runs out under load
    (EMFILE, read as a failed node) long before the hard limit does."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return target
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-files limit from %d: %s", soft, exc)
    return soft


def serve(factory: AppFactory, conf: Section, name: str, default_workers: str = "1") -> None:
    """Run `factory`'s app per `conf` (bind_ip, bind_port, workers, log_level, log_file).

    workers <= 1 serves in this process; more forks that many children, each with its own
    SO_REUSEPORT socket so the kernel spreads connections, and restarts any that die.
    """
    setup_logging(name, conf.get_str("log_level", "INFO"), conf.get("log_file"))
    # Before any fork or bind: without a usable secret, a storage server would be open to
    # anyone and a proxy could reach none of them.
    signing.configure(conf)
    raise_fd_limit(conf.get_int("max_open_files", 65536))
    workers = worker_count(conf, default_workers)
    metrics.prepare(conf, name)
    try:
        _serve(factory, conf, name, workers)
    except StartupFailed as exc:  # one worker, in this process
        _refuse(name, exc)
        sys.exit(EX_CONFIG)
    finally:
        metrics.cleanup()


def _refuse(name: str, exc: BaseException) -> None:
    """Say once, in the log and on stderr, why a server won't start."""
    cause = exc.__cause__ or exc
    log.error("%s refusing to start: %s", name, exc, exc_info=cause)
    print(f"swiftlite: {name} refusing to start: {exc}", file=sys.stderr, flush=True)


def _serve(factory: AppFactory, conf: Section, name: str, workers: int) -> None:
    for hook in _before_fork:
        hook(conf)
    ip = conf.get_str("bind_ip", "127.0.0.1")
    port = conf.get_int("bind_port", 0)
    first = inherited_socket() or listen_socket(ip, port, reuse_port=workers > 1)
    if workers <= 1:
        _worker(factory, conf, name, first)
        return
    # One SO_REUSEPORT socket per worker slot, all opened here and kept: the port is never
    # free between forks (nobody else can take it), a restarted worker accepts on its slot's
    # socket, and the kernel spreads connections over the slots.
    port = first.getsockname()[1]
    if first.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT):
        sockets = [first] + [listen_socket(ip, port, reuse_port=True)
                             for _ in range(workers - 1)]
    else:  # an inherited socket made for one worker: the workers share its accept queue
        sockets = [first] * workers
    children: dict[int, int] = {}
    spawned: dict[int, float] = {}
    backoff: dict[int, float] = {}
    stopping = False
    status_code = 0

    def spawn(slot: int) -> None:
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            code = 1
            try:
                _worker(factory, conf, name, sockets[slot])
                code = 0
            except (signing.SecretError, StartupFailed) as exc:  # don't respawn: stop them all
                _refuse(name, exc)
                code = EX_CONFIG
            except BaseException:
                log.exception("%s worker crashed", name)
            finally:
                os._exit(code)
        children[pid] = slot
        spawned[slot] = time.monotonic()

    def stop(signum, frame) -> None:
        nonlocal stopping
        stopping = True
        for pid in list(children):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for slot in range(workers):
        spawn(slot)
    while children:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        slot = children.pop(pid, None)
        metrics.worker_exit(pid)
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == EX_CONFIG:
            status_code = EX_CONFIG  # every worker would fail the same way: stop them all
            stop(signal.SIGTERM, None)
            continue
        if slot is not None and not stopping:
            # A worker that dies soon after it started would die again at once: back off
            # (doubling to 30 s) rather than fork in a tight loop.
            quick = time.monotonic() - spawned.get(slot, 0.0) < WORKER_STABLE_AFTER
            delay = min(30.0, backoff.get(slot, 0.05) * 2) if quick else 0.0
            backoff[slot] = delay or 0.05
            log.error("%s worker %d exited with %d; restarting in %.1fs", name, pid, status,
                      delay)
            if delay:
                time.sleep(delay)  # a SIGTERM meanwhile runs stop(); checked below
            if not stopping:
                spawn(slot)
    sys.exit(status_code)
