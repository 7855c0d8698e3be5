"""Failure-domain tiers (region > zone > host > device) and how many replicas each should hold.

Every tier node gets a target: the replicas of an average partition it should hold. Targets
follow weight, but are clamped so a partition's replicas spread as evenly as the topology
allows: with k replicas in a parent of n children, a child holds between floor(k/n) and
ceil(k/n), and never more than it has devices. Dispersion beats weight, as in Swift: a zone
too small for its share still takes one replica of everything when zones == replicas.
Integer quotas (assignments per node) are then split from the top with largest remainders,
so quotas sum exactly and a constrained tier's quota is exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

LEVELS = ("region", "zone", "host", "device")
EPS = 1e-9


@dataclass
class Tiers:
    """Flat node arrays; node 0 is the root, its descendants are regions, zones, hosts, devs."""

    level: list[int] = field(default_factory=list)        # 0 root .. 4 device
    key: list[tuple] = field(default_factory=list)        # (region, zone, ip, dev id) prefix
    children: list[list[int]] = field(default_factory=list)
    weight: list[float] = field(default_factory=list)
    ndevs: list[int] = field(default_factory=list)
    target: list[float] = field(default_factory=list)     # replicas per partition
    maxrep: list[int] = field(default_factory=list)       # most replicas of one partition
    dev_of: list[int] = field(default_factory=list)       # device id for device nodes, else -1
    path: dict[int, tuple[int, ...]] = field(default_factory=dict)  # dev id -> nodes, root first

    def _new(self, level: int, key: tuple) -> int:
        self.level.append(level)
        self.key.append(key)
        self.children.append([])
        self.weight.append(0.0)
        self.ndevs.append(0)
        self.target.append(0.0)
        self.maxrep.append(0)
        self.dev_of.append(-1)
        return len(self.level) - 1

    def nodes_at(self, level: int) -> list[int]:
        return [n for n, lv in enumerate(self.level) if lv == level]


def build_tiers(devs: list[dict[str, Any] | None], replicas: int) -> Tiers:
    """The tier tree of active devices (weight > 0) with each node's replica target."""
    t = Tiers()
    root = t._new(0, ())
    index: dict[tuple, int] = {}
    active = sorted((d for d in devs if d is not None and d["weight"] > 0 and
                     not d.get("removed")),
                    key=lambda d: (d["region"], d["zone"], d["ip"], d["id"]))
    for d in active:
        keys = ((d["region"],), (d["region"], d["zone"]),
                (d["region"], d["zone"], d["ip"]), (d["region"], d["zone"], d["ip"], d["id"]))
        parent = root
        path = [root]
        for level, k in enumerate(keys, start=1):
            node = index.get(k)
            if node is None:
                node = index[k] = t._new(level, k)
                t.children[parent].append(node)
            path.append(node)
            parent = node
        t.dev_of[parent] = d["id"]
        for node in path:
            t.weight[node] += d["weight"]
            t.ndevs[node] += 1
        t.path[d["id"]] = tuple(path)
    t.target[root] = float(replicas)
    t.maxrep[root] = replicas
    # Parents precede children in node order, so one forward pass fills every target.
    for node in range(len(t.level)):
        kids = t.children[node]
        if kids:
            for kid, x in zip(kids, _split_target(t, node, kids), strict=True):
                t.target[kid] = x
                t.maxrep[kid] = max(1, math.ceil(x - EPS)) if x > EPS else 0
    return t


def _split_target(t: Tiers, node: int, kids: list[int]) -> list[float]:
    total = t.target[node]
    n = len(kids)
    lo_k, hi_k = math.floor(total + EPS), math.ceil(total - EPS)
    lo = [min(t.ndevs[k], lo_k // n) for k in kids]
    hi = [min(t.ndevs[k], -(-hi_k // n)) for k in kids]
    if sum(hi) < total - EPS:  # siblings too small to share evenly: let the big ones take more
        hi = [min(t.ndevs[k], hi_k) for k in kids]
    w = [t.weight[k] for k in kids]

    def filled(lam: float) -> list[float]:
        return [min(h, max(lo_i, lam * wi)) for lo_i, h, wi in zip(lo, hi, w, strict=True)]

    low, high = 0.0, 1.0
    while sum(filled(high)) < total - EPS and high < 1e300:
        high *= 2
    for _ in range(200):
        mid = (low + high) / 2
        if sum(filled(mid)) < total:
            low = mid
        else:
            high = mid
    out = filled(high)
    s = sum(out)
    if s > 0 and abs(s - total) > EPS:  # infeasible bounds: keep the proportions
        out = [x * total / s for x in out]
    return out


def split_quota(quota: int, shares: list[float], prefer: list[int]) -> list[int]:
    """Split an integer quota by float shares with largest remainders; ties go to `prefer`
    (current holdings), so rounding never moves a partition that needn't move."""
    s = sum(shares)
    if s <= 0:
        return [0] * len(shares)
    exact = [x * quota / s for x in shares]
    out = [math.floor(x + EPS) for x in exact]
    left = quota - sum(out)
    order = sorted(range(len(shares)),
                   key=lambda i: (-(exact[i] - out[i]), -prefer[i], i))
    for i in order[:max(0, left)]:
        out[i] += 1
    return out


def node_quotas(t: Tiers, parts: int, counts: dict[int, int]) -> list[int]:
    """Integer assignments per node (root = parts * replicas); `counts` is per node."""
    quota = [0] * len(t.level)
    if not t.level:
        return quota
    quota[0] = round(t.target[0] * parts)
    for node in range(len(t.level)):
        kids = t.children[node]
        if kids:
            split = split_quota(quota[node], [t.target[k] for k in kids],
                                [counts.get(k, 0) for k in kids])
            for kid, q in zip(kids, split, strict=True):
                quota[kid] = min(q, parts * t.maxrep[kid])
    return quota
