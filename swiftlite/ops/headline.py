"""The few numbers worth a glance, from a server's own `/metrics` (what `swiftlite status`
prints under each server): requests and errors by method, latency percentiles, bytes, and a
container or account server's update commits (device rounds, and DBs holding logged rows)."""

from __future__ import annotations

import urllib.request
from typing import Any


def scrape(url: str, timeout: float = 2.0) -> dict[str, list[tuple[dict[str, str], float]]]:
    """sample name -> [(labels, value)] of a Prometheus text page."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=timeout) as r:
        text = r.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """The q-quantile from cumulative histogram buckets [(upper bound, count)], as the
    upper bound of the bucket it falls in (what a histogram can say)."""
    buckets = sorted(buckets)
    if not buckets or buckets[-1][1] <= 0:
        return None
    want = q * buckets[-1][1]
    for bound, count in buckets:
        if count >= want:
            return bound
    return buckets[-1][0]


def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    if v == float("inf"):
        return ">30s"
    return f"{v * 1000:.0f}ms" if v >= 0.01 else f"{v * 1000:.1f}ms"


def summarize(samples: dict[str, list[tuple[dict[str, str], float]]]) -> list[str]:
    """Lines: per method its requests, 5xx, p50/p99 (since the server started), and the
    bytes in and out."""
    by_method: dict[str, dict[str, Any]] = {}
    for labels, value in samples.get("swiftlite_requests_total", []):
        m = by_method.setdefault(labels.get("method", "?"), {"n": 0.0, "5xx": 0.0})
        m["n"] += value
        if labels.get("status", "").startswith("5"):
            m["5xx"] += value
    buckets: dict[str, dict[float, float]] = {}
    for labels, value in samples.get("swiftlite_request_duration_seconds_bucket", []):
        per = buckets.setdefault(labels.get("method", "?"), {})
        bound = float(labels["le"])
        per[bound] = per.get(bound, 0.0) + value  # summed over the request types
    lines = []
    for method in sorted(by_method, key=lambda k: -by_method[k]["n"]):
        m = by_method[method]
        b = list(buckets.get(method, {}).items())
        lines.append(f"{method} {int(m['n'])} requests, {int(m['5xx'])} 5xx, "
                     f"p50 {_ms(quantile(b, 0.5))} p99 {_ms(quantile(b, 0.99))}")
    nin = sum(v for _, v in samples.get("swiftlite_request_bytes_total", []))
    nout = sum(v for _, v in samples.get("swiftlite_response_bytes_total", []))
    if by_method:
        lines.append(f"bytes in {nin / 2**20:.1f} MiB, out {nout / 2**20:.1f} MiB")
    rounds = _total(samples, "swiftlite_db_commit_round_updates_count")
    if rounds:
        updates = _total(samples, "swiftlite_db_commit_round_updates_sum")
        deferred = _total(samples, "swiftlite_db_commit_deferred_total")
        held = _total(samples, "swiftlite_db_held_dbs")
        lines.append(f"update rounds {int(rounds)} ({updates / rounds:.1f} updates each), "
                     f"{int(deferred)} left to a busy DB, {int(held)} DBs holding rows")
    return lines


def _total(samples: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float:
    return sum(v for _, v in samples.get(name, []))


def headline(ip: str, port: int) -> list[str]:
    """Headline lines of one server; [] when its metrics cannot be read."""
    host = f"[{ip}]" if ":" in ip else ip
    try:
        return summarize(scrape(f"http://{host}:{port}/metrics"))
    except (OSError, ValueError):
        return []
