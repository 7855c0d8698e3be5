"""Prometheus metrics for every server (prometheus_client), summed over a server's workers.

Each server answers `GET /metrics` in the Prometheus text format, to clients in
`metrics_allowed_networks` only (default: loopback; 403 for anyone else: request counts and
disk usage are not for tenants). Workers forked by `serve` keep their values in memory-mapped
files in one directory per server (`metrics_dir`; default `<tmp>/swiftlite-metrics/<server>-<pid>`,
removed at exit, or by the next server to start if this one was killed), and a scrape on
any worker sums them all, so counters are right however SO_REUSEPORT spreads the requests.
Hot-path counts (requests, replica reads, cache lookups) are totalled in the worker and
written to its files once a second and at each of its scrapes, so a scrape may lag the other
workers by up to a second.

What is measured:
- every server: requests by server, method, status, request type (account, container,
  object, other) and policy; their latency (histogram); bytes received and sent; the I/O
  thread pool's queued jobs and threads;
- object servers: batch-commit batch sizes and flush latency; and for their node (one
  series per node, not per server role): each daemon's last pass (start, duration and its
  counters: partitions, objects, synced, failures, quarantined...), async_pending updates
  waiting, and disk usage per device. Daemons have no port of their own: their passes reach
  Prometheus through these status files (`<status_dir>/<daemon>.json`).

prometheus_client reads PROMETHEUS_MULTIPROC_DIR when it is first imported, so this module
imports it only in `init`, after `prepare` set the directory.
"""

from __future__ import annotations

import bisect
import ipaddress
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from swiftlite.common import threadpool
from swiftlite.common.config import Section

log = logging.getLogger("swiftlite.metrics")

POLICY = "Policy-0"  # the only storage policy so far
_TYPES = {1: "account", 2: "container", 3: "object"}  # names in the path -> request type

_state: dict[str, Any] = {}
_m: dict[str, Any] = {}  # the metric objects, once init() ran
# Values read into their metrics once a second by a thread, off the request path (see
# `sampled`): what they measure changes on every request, and a multiprocess metric write
# (a pid check, a lock, an mmap store) is dear there.
_samplers: list[Callable[[], None]] = []
# Counts kept in plain dicts by hot paths (tally), added to their metric by a sampler.
_tallies: dict[str, dict[tuple[str, ...], int]] = {}
# observe_request's running totals by (method, status, type): count, seconds, bytes in,
# bytes out, then one count per latency bucket; and what of them the metrics already hold.
_requests: dict[tuple[str, int, str], list] = {}
_flushed: dict[tuple[str, int, str], list] = {}
MAX_REMEMBERED_SERIES = 1024
LATENCY_BUCKETS = (.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30,
                   float("inf"))
_sampler_pid = 0
SAMPLE_INTERVAL = 1.0
_sampling = threading.Lock()


def _after_fork() -> None:
    global _sampling
    _sampling = threading.Lock()  # a parent's sampler may have held it when we forked


os.register_at_fork(after_in_child=_after_fork)


def prepare(conf: Section, name: str) -> None:
    """In the parent, before workers fork: the shared values directory, emptied."""
    path = conf.get("metrics_dir")
    if path:
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path, exist_ok=True)
        own = False
    else:
        base = os.path.join(tempfile.gettempdir(), "swiftlite-metrics")
        _remove_orphans(base)
        path = os.path.join(base, f"{name}-{os.getpid()}")
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path, mode=0o700)
        own = True
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    nets = []
    for item in conf.get_str("metrics_allowed_networks", "127.0.0.0/8, ::1").split(","):
        if item.strip():
            nets.append(ipaddress.ip_network(item.strip(), strict=False))
    _state.update(dir=path, own_dir=own, name=name, networks=nets, conf=conf)


def _remove_orphans(base: str) -> None:
    """Directories of servers that died without cleaning up (SIGKILL): `<name>-<pid>` whose
    pid is gone."""
    try:
        entries = os.listdir(base)
    except FileNotFoundError:
        return
    for entry in entries:
        pid = entry.rsplit("-", 1)[-1]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(base, entry), ignore_errors=True)
        except PermissionError:
            pass  # someone else's live server


def cleanup() -> None:
    """At the server's exit: a directory we made goes with us."""
    if _state.get("own_dir"):
        shutil.rmtree(_state["dir"], ignore_errors=True)


def init() -> None:
    """In each worker: the metric objects (values in this worker's files)."""
    if "dir" not in _state or _m:
        return
    from prometheus_client import Counter, Gauge, Histogram

    _requests.clear()  # counted for metric objects made before
    _flushed.clear()

    _m["requests"] = Counter("swiftlite_requests", "Requests answered",
                             ["server", "method", "status", "type", "policy"])
    _m["latency"] = Histogram(
        "swiftlite_request_duration_seconds", "Time to answer a request, body included",
        ["server", "method", "type"],
        buckets=LATENCY_BUCKETS)
    _m["bytes_in"] = Counter("swiftlite_request_bytes", "Request body bytes received",
                             ["server", "method", "type"])
    _m["bytes_out"] = Counter("swiftlite_response_bytes", "Response body bytes sent",
                              ["server", "method", "type"])
    _m["pool_queued"] = Gauge("swiftlite_threadpool_queued_jobs",
                              "Disk and database jobs waiting for an I/O thread",
                              ["server"], multiprocess_mode="livesum")
    _m["pool_threads"] = Gauge("swiftlite_threadpool_threads", "I/O threads started",
                               ["server"], multiprocess_mode="livesum")
    _m["batch_size"] = Histogram("swiftlite_batch_commit_objects",
                                 "Objects committed per batch (one pair of flushes each)",
                                 buckets=(1, 2, 4, 8, 16, 32, 64))
    _m["flush"] = Histogram("swiftlite_batch_commit_seconds",
                            "Time to write, flush and rename one batch",
                            buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5))
    _m["cache_dropped"] = Counter("swiftlite_page_cache_dropped_files",
                                  "Written object files dropped from the page cache, past "
                                  "the newest written_cache_size bytes")
    # Rows per commit, for device rounds and held applies alike.
    db_rows = (1, 2, 4, 8, 16, 32, 64, 128, 256, 1000)
    _m["db_round"] = Histogram("swiftlite_db_commit_round_updates",
                               "Container/account updates committed per device round "
                               "(one update-log flush each)",
                               buckets=db_rows)
    _m["db_round_dbs"] = Histogram("swiftlite_db_commit_round_dbs",
                                   "DBs committed per device round",
                                   buckets=(1, 2, 4, 8, 16, 32, 64))
    _m["db_round_time"] = Histogram("swiftlite_db_commit_round_seconds",
                                    "Time to apply a device round and flush its log",
                                    buckets=(.0005, .001, .0025, .005, .01, .025, .05, .1,
                                             .25, .5, 1))
    _m["db_deferred"] = Counter("swiftlite_db_commit_deferred",
                                "DB batches a device round left to the DB's own commit "
                                "(another writer held the DB)")
    _m["db_held_apply"] = Histogram("swiftlite_db_held_apply_rows",
                                    "Logged rows a container DB held, applied in one "
                                    "transaction (db_update_log_apply_*)",
                                    buckets=db_rows)
    _m["db_held_dbs"] = Gauge("swiftlite_db_held_dbs",
                              "DBs holding logged rows not applied yet",
                              multiprocess_mode="livesum")
    _m["db_replayed"] = Counter("swiftlite_db_update_log_replayed_segments",
                                "Update-log segments a crash left, replayed")
    _m["cache"] = Counter("swiftlite_proxy_object_cache_lookups",
                          "Object cache lookups by result (hit, miss, unsynced: a miss "
                          "because this worker has not heard other hosts' writes lately)",
                          ["result"])
    _m["cache_fills"] = Counter("swiftlite_proxy_object_cache_fills",
                                "Objects a cache miss read whole, by what became of them "
                                "(admitted; not_admitted: the cache was full and the object "
                                "had not missed lately)", ["result"])
    _m["replica_reads"] = Counter("swiftlite_proxy_replica_reads",
                                  "Object GET/HEAD replica reads the proxy made, by device "
                                  "(ip:port/device of its object server) and path (local: "
                                  "the proxy's own read of a device on its host)",
                                  ["device", "via"])
    _m["unpublished"] = Counter("swiftlite_proxy_write_log_unpublished",
                                "Object writes other proxy hosts could not be told of")
    _m["plain_reads"] = Counter("swiftlite_proxy_plain_reads",
                                "Plain object reads (GET/HEAD, no query, Range or condition) "
                                "by route: shortcut (past the features that leave them "
                                "alone) or declined (a feature had to see it: the full "
                                "pipeline answered)", ["route"])
    _m["connections_shed"] = Counter("swiftlite_client_connections_shed",
                                     "Client connections shed at max_clients, by how: "
                                     "evicted (the oldest with no request in progress "
                                     "closed) or refused (a newcomer answered 503)", ["how"])
    _m["image_variants"] = Counter("swiftlite_proxy_image_variants",
                                   "Image variant requests by result: computed (made and "
                                   "stored), cached (served from a stored variant), joined "
                                   "(served from another request's making of it), refused "
                                   "(a 4xx: bad query, not an image, past a limit)",
                                   ["result"])
    _m["image_compute"] = Histogram("swiftlite_proxy_image_compute_seconds",
                                    "Time to make one image variant in the process pool "
                                    "(decode, transform, encode)", buckets=LATENCY_BUCKETS)
    for name in ("replica_reads", "plain_reads", "cache", "cache_fills", "connections_shed",
                 "image_variants"):
        sampled(_tally_sampler(name))
    sampled(lambda: pool_state(*threadpool.state()))
    sampled(_flush_requests)
    _start_sampler()


def sampled(fn: Callable[[], None]) -> None:
    """Call `fn` (which sets metrics from its values) once a second in this process."""
    _samplers.append(fn)


def _start_sampler() -> None:
    global _sampler_pid
    if _sampler_pid == os.getpid():
        return
    _sampler_pid = os.getpid()
    threading.Thread(target=_sample_loop, name="swiftlite-metrics", daemon=True).start()


def _sample_loop() -> None:
    while True:
        time.sleep(SAMPLE_INTERVAL)
        sample_now()


def sample_now() -> None:
    """Every sampler of this process, once (a scrape calls this first, so the scraped
    worker's own counts are current; the others' are at most a second old)."""
    with _sampling:  # two flushes at once would both add the same delta
        for fn in list(_samplers):
            try:
                fn()
            except Exception:  # a sampler's bug must not end the others' sampling
                log.exception("metrics sampler failed")


def _tally_sampler(name: str) -> Callable[[], None]:
    """Adds what was tallied under `name` since its last call to that metric."""
    counts = _tallies.setdefault(name, {})
    flushed: dict[tuple[str, ...], int] = {}

    def sample() -> None:
        nonlocal flushed
        now = dict(counts)  # one C-level copy: no increment is torn
        for key, n in now.items():
            if n != flushed.get(key, 0):
                _m[name].labels(*key).inc(n - flushed.get(key, 0))
        flushed = now
    return sample


def tally(name: str, *labels: str) -> None:
    """One more of the counter `name` with these label values, counted in a dict here and
    added to the metric within a second: a multiprocess counter's update (a pid check, a
    lock, an mmap write) is dear on a path every request takes."""
    counts = _tallies.get(name)
    if counts is not None:
        counts[labels] = counts.get(labels, 0) + 1


def enabled() -> bool:
    return bool(_m)


def request_type(server: str, path: str) -> str:
    """account, container, object or other, from the path's names."""
    if server == "proxy-server":  # /v1/account[/container[/object]]
        parts = path.split("/", 4)
        if len(parts) < 3 or parts[1] not in ("v1", "v1.0"):
            return "other"
        names = parts[2:]
    else:  # /device/partition/account[/container[/object]]
        names = path.split("/", 5)[3:]
    return _TYPES.get(len([n for n in names if n]), "other")


def observe_request(method: str, path: str, status: int, seconds: float, bytes_in: int,
                    bytes_out: int) -> None:
    """Counted in this worker's memory; `_flush_requests` adds it to the shared metrics
    within a second. Four multiprocess updates per request (each a pid check, a lock and an
    mmap store) were about 6% of a proxy serving cached objects."""
    if not _m or path in ("/metrics", "/healthcheck"):
        return
    key = (method, status, request_type(_state["name"], path))
    acc = _requests.get(key)
    if acc is None:
        if len(_requests) >= MAX_REMEMBERED_SERIES:  # clients choose methods: bounded
            key = ("OTHER", status, key[2])
            acc = _requests.get(key)
        if acc is None:
            acc = _requests[key] = [0, 0.0, 0, 0] + [0] * len(LATENCY_BUCKETS)
    acc[0] += 1
    acc[1] += seconds
    acc[2] += bytes_in
    acc[3] += bytes_out
    acc[4 + bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1


def _flush_requests() -> None:
    """What observe_request counted since the last call, into the request metrics."""
    for key, acc in list(_requests.items()):
        now = acc[:]  # one C-level copy; a torn read only defers a count to the next call
        before = _flushed.get(key)
        if before == now:
            continue
        before = before or [0] * len(now)
        # Marked flushed first: a failure below loses these counts, never adds them twice.
        _flushed[key] = now
        method, status, kind = key
        server = _state["name"]
        if now[0] != before[0]:
            _m["requests"].labels(server, method, str(status), kind, POLICY).inc(
                now[0] - before[0])
        hist = _m["latency"].labels(server, method, kind)
        hist._sum.inc(now[1] - before[1])  # Histogram.observe's own two stores, n at once
        for i in range(4, len(now)):
            if now[i] != before[i]:
                hist._buckets[i - 4].inc(now[i] - before[i])
        if now[2] != before[2]:
            _m["bytes_in"].labels(server, method, kind).inc(now[2] - before[2])
        if now[3] != before[3]:
            _m["bytes_out"].labels(server, method, kind).inc(now[3] - before[3])


def pool_state(queued: int, threads: int) -> None:
    if _m:
        server = _state["name"]
        _m["pool_queued"].labels(server).set(queued)
        _m["pool_threads"].labels(server).set(threads)


def batch_committed(objects: int, seconds: float) -> None:
    if _m:
        _m["batch_size"].observe(objects)
        _m["flush"].observe(seconds)


def written_dropped(files: int) -> None:
    if _m and files:
        _m["cache_dropped"].inc(files)


def db_round(updates: int, dbs: int, seconds: float, deferred: int) -> None:
    if _m:
        _m["db_round"].observe(updates)
        _m["db_round_dbs"].observe(dbs)
        _m["db_round_time"].observe(seconds)
        if deferred:
            _m["db_deferred"].inc(deferred)


def db_held(applied: list[int], dbs_delta: int) -> None:
    """Held rows applied (rows per transaction), and the change in DBs holding rows."""
    if _m:
        for n in applied:
            _m["db_held_apply"].observe(n)
        if dbs_delta:
            _m["db_held_dbs"].inc(dbs_delta)


def update_log_replayed(segments: int) -> None:
    if _m and segments:
        _m["db_replayed"].inc(segments)


def cache_lookup(result: str) -> None:
    tally("cache", result)


def cache_fill(result: str) -> None:
    tally("cache_fills", result)


def image_variant(result: str) -> None:
    tally("image_variants", result)


def image_computed(seconds: float) -> None:
    if _m:
        _m["image_compute"].observe(seconds)


def replica_read(node: dict[str, Any], via: str) -> None:
    """Counted here, added to the metric by the sampler within a second."""
    if _m:
        tally("replica_reads", f"{node['ip']}:{node['port']}/{node['device']}", via)


def writes_unpublished(n: int) -> None:
    if _m:
        _m["unpublished"].inc(n)


def allowed(remote: str | None) -> bool:
    try:
        addr = ipaddress.ip_address(remote or "")
    except ValueError:
        return False
    return any(addr in net for net in _state.get("networks", ()))


def exposition() -> bytes:
    """Every worker's values summed, plus the node's (object servers): blocking file reads,
    for the thread pool."""
    from prometheus_client import CollectorRegistry, generate_latest, multiprocess

    sample_now()
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, _state["dir"])
    if _state["name"] == "object-server":
        registry.register(_NodeCollector(_state["conf"]))
    return generate_latest(registry)


def worker_exit(pid: int) -> None:
    """A worker is gone: its live gauges stop counting."""
    if _state.get("dir"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid, _state["dir"])


class _NodeCollector:
    """The node's daemons (their status files), async_pendings and devices, read at scrape."""

    def __init__(self, conf: Section) -> None:
        from swiftlite.common.devices import device_roots, status_dir

        self.roots = device_roots(conf)
        self.status_dir = status_dir(conf)

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        from swiftlite.common.observe.recon import daemon_statuses, device_usage

        start = GaugeMetricFamily("swiftlite_daemon_last_pass_start_timestamp_seconds",
                                  "When each daemon's last pass began", labels=["daemon"])
        took = GaugeMetricFamily("swiftlite_daemon_last_pass_duration_seconds",
                                 "How long each daemon's last pass took", labels=["daemon"])
        age = GaugeMetricFamily("swiftlite_daemon_last_pass_age_seconds",
                                "Seconds since each daemon's last pass ended",
                                labels=["daemon"])
        counts = GaugeMetricFamily("swiftlite_daemon_last_pass_items",
                                   "Counters of each daemon's last pass",
                                   labels=["daemon", "counter"])
        now = time.time()
        for daemon, status in daemon_statuses(self.status_dir).items():
            if not isinstance(status.get("start"), (int, float)):
                continue
            start.add_metric([daemon], status["start"])
            duration = float(status.get("duration", 0))
            took.add_metric([daemon], duration)
            age.add_metric([daemon], max(0.0, now - status["start"] - duration))
            for k, v in status.items():
                if k not in ("start", "duration", "pid", "running_since") \
                        and isinstance(v, (int, float)) \
                        and not isinstance(v, bool):
                    counts.add_metric([daemon, k], v)
        yield from (start, took, age, counts)
        disk = GaugeMetricFamily("swiftlite_device_bytes", "Filesystem size of each device",
                                 labels=["device", "kind"])
        pending = GaugeMetricFamily("swiftlite_async_pending_updates",
                                    "Container updates waiting for the object updater",
                                    labels=["device"])
        journal = GaugeMetricFamily("swiftlite_digest_journal_bytes",
                                    "Digest journal bytes not yet folded into the digests",
                                    labels=["device"])
        journals = GaugeMetricFamily("swiftlite_digest_journal_partitions",
                                     "Partitions with a digest journal not yet folded",
                                     labels=["device"])
        # DB devices (meta_devices) are labelled meta/<dev>: their names may repeat the
        # object devices'.
        devices = [(dev, usage) for dev, usage in device_usage(self.roots[0]).items()]
        for root in self.roots[1:]:
            devices += [(f"meta/{dev}", usage) for dev, usage in device_usage(root).items()]
        for dev, usage in devices:
            if "total" in usage:
                for kind in ("total", "free", "used"):
                    disk.add_metric([dev, kind], usage[kind])
            pending.add_metric([dev], usage["async_pending"])
            journal.add_metric([dev], usage["journal_bytes"])
            journals.add_metric([dev], usage["journal_partitions"])
        yield from (disk, pending, journal, journals)
