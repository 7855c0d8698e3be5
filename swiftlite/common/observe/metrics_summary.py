"""The headline numbers of a server's Prometheus page (common/observe/metrics.py): requests and
errors by method, latency quantiles from the request histogram, bytes in and out, and a
container or account server's update commits. Shared by `swiftlite status`
(ops/headline.py, which prints them) and the console's operator page (which charts them).

Counts are since the server started, summed over its workers and request types: a caller
that wants rates takes deltas between two readings.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Samples = dict[str, list[tuple[dict[str, str], float]]]


def parse(text: str) -> Samples:
    """sample name -> [(labels, value)] of a Prometheus text page."""
    from prometheus_client.parser import text_string_to_metric_families

    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """The q-quantile from cumulative histogram buckets [(upper bound, count)], as the
    upper bound of the bucket it falls in (what a histogram can say): inf when it falls
    past the last finite bound."""
    buckets = sorted(buckets)
    if not buckets or buckets[-1][1] <= 0:
        return None
    want = q * buckets[-1][1]
    for bound, count in buckets:
        if count >= want:
            return bound
    return buckets[-1][0]


@dataclass
class MethodTotals:
    requests: float = 0.0
    errors_4xx: float = 0.0
    errors_5xx: float = 0.0
    counted: bool = False  # seen in the request counter (not only in the histogram)
    # latency histogram: upper bound (seconds) -> cumulative count
    buckets: dict[float, float] = field(default_factory=dict)


def by_method(samples: Samples) -> dict[str, MethodTotals]:
    """Requests, 4xx, 5xx and the latency histogram of each method."""
    out: dict[str, MethodTotals] = {}
    for labels, value in samples.get("swiftlite_requests_total", []):
        m = out.setdefault(labels.get("method", "?"), MethodTotals())
        m.counted = True
        m.requests += value
        status = labels.get("status", "")
        if status.startswith("4"):
            m.errors_4xx += value
        elif status.startswith("5"):
            m.errors_5xx += value
    for labels, value in samples.get("swiftlite_request_duration_seconds_bucket", []):
        per = out.setdefault(labels.get("method", "?"), MethodTotals()).buckets
        bound = float(labels["le"])
        per[bound] = per.get(bound, 0.0) + value  # summed over the request types
    return out


def total(samples: Samples, name: str) -> float:
    return sum(v for _, v in samples.get(name, []))


def bytes_in_out(samples: Samples) -> tuple[float, float]:
    return (total(samples, "swiftlite_request_bytes_total"),
            total(samples, "swiftlite_response_bytes_total"))
