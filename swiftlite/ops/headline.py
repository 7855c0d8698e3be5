"""The few numbers worth a glance, from a server's own `/metrics` (what `swiftlite status`
prints under each server): requests and errors by method, latency percentiles, bytes, and a
container or account server's update commits (device rounds, and DBs holding logged rows).
The numbers come from common/observe/metrics_summary.py (the console charts the same ones)."""

from __future__ import annotations

import urllib.request

from swiftlite.common.observe.metrics_summary import (
    Samples,
    by_method,
    bytes_in_out,
    parse,
    quantile,
    total,
)

__all__ = ["headline", "quantile", "scrape", "summarize"]


def scrape(url: str, timeout: float = 2.0) -> Samples:
    """sample name -> [(labels, value)] of a Prometheus text page."""
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return parse(r.read().decode())


def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    if v == float("inf"):
        return ">30s"
    return f"{v * 1000:.0f}ms" if v >= 0.01 else f"{v * 1000:.1f}ms"


def summarize(samples: Samples) -> list[str]:
    """Lines: per method its requests, 5xx, p50/p99 (since the server started), and the
    bytes in and out."""
    methods = by_method(samples)
    lines = []
    for method in sorted(methods, key=lambda k: -methods[k].requests):
        m = methods[method]
        if not m.counted:
            continue  # a histogram without a request count says nothing worth a line
        b = list(m.buckets.items())
        lines.append(f"{method} {int(m.requests)} requests, {int(m.errors_5xx)} 5xx, "
                     f"p50 {_ms(quantile(b, 0.5))} p99 {_ms(quantile(b, 0.99))}")
    nin, nout = bytes_in_out(samples)
    if lines:
        lines.append(f"bytes in {nin / 2**20:.1f} MiB, out {nout / 2**20:.1f} MiB")
    rounds = total(samples, "swiftlite_db_commit_round_updates_count")
    if rounds:
        updates = total(samples, "swiftlite_db_commit_round_updates_sum")
        deferred = total(samples, "swiftlite_db_commit_deferred_total")
        held = total(samples, "swiftlite_db_held_dbs")
        lines.append(f"update rounds {int(rounds)} ({updates / rounds:.1f} updates each), "
                     f"{int(deferred)} left to a busy DB, {int(held)} DBs holding rows")
    return lines


def headline(ip: str, port: int) -> list[str]:
    """Headline lines of one server; [] when its metrics cannot be read."""
    host = f"[{ip}]" if ":" in ip else ip
    try:
        return summarize(scrape(f"http://{host}:{port}/metrics"))
    except (OSError, ValueError):
        return []
