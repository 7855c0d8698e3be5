"""The ring builder: devices, their weights, and the partition -> device tables built from them.

The builder state is a msgpack file (atomic write); `get_ring_data` produces what every
server loads (swiftlite.ring.write_ring writes it). See placement.py for how a rebalance works.
"""

from __future__ import annotations

import math
import random
import sys
import time
from array import array
from collections import Counter
from typing import Any

import msgpack

from ringbuilder.devices import (
    RingBuilderError,
    check_device,
    matches,
    parse_search_value,
    parse_weight,
)
from ringbuilder.placement import NONE_DEV, Placer
from ringbuilder.tiers import LEVELS, build_tiers
from swiftlite.common.fsutil import atomic_write
from swiftlite.ring.ring import DEV_KEYS, RingData

__all__ = ["RingBuilder", "RingBuilderError"]

FORMAT = "swiftlite-ring-builder"
MAX_DEVS = NONE_DEV  # ids are uint16 and 0xFFFF marks a hole


def _to_le(a: array) -> bytes:
    if sys.byteorder != "little":
        a = array(a.typecode, a)
        a.byteswap()
    return a.tobytes()


def _from_le(typecode: str, blob: bytes) -> array:
    a = array(typecode)
    a.frombytes(blob)
    if sys.byteorder != "little":
        a.byteswap()
    return a


class RingBuilder:
    def __init__(self, part_power: int, replicas: int, min_part_hours: int) -> None:
        if isinstance(part_power, bool) or not isinstance(part_power, int) \
                or not 1 <= part_power <= 32:
            raise RingBuilderError(f"invalid part_power {part_power!r}: must be 1..32")
        if isinstance(replicas, float) and replicas.is_integer():
            replicas = int(replicas)
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
            raise RingBuilderError(f"invalid replicas {replicas!r}: must be an integer >= 1")
        if isinstance(min_part_hours, bool) or not isinstance(min_part_hours, int) \
                or min_part_hours < 0:
            raise RingBuilderError(
                f"invalid min_part_hours {min_part_hours!r}: must be an integer >= 0")
        self.part_power = part_power
        self.replicas = replicas
        self.min_part_hours = min_part_hours
        self.devs: list[dict[str, Any] | None] = []
        self._tables: list[array] = []        # replica -> partition -> dev id
        self._last_move = array("I")          # partition -> unix time of its last move (0: never)
        self.version = 0                      # bumped by every rebalance that changed something
        self.devs_changed = False

    @property
    def parts(self) -> int:
        return 1 << self.part_power

    # -- devices -------------------------------------------------------------------------------

    def _live_devs(self) -> list[dict[str, Any]]:
        return [d for d in self.devs if d is not None and not d.get("removed")]

    def add_dev(self, dev: dict[str, Any]) -> int:
        clean = check_device(dev)
        for other in self._live_devs():
            if (other["ip"], other["port"], other["device"]) == \
                    (clean["ip"], clean["port"], clean["device"]):
                raise RingBuilderError(
                    f"duplicate device {clean['ip']}:{clean['port']}/{clean['device']}: "
                    f"already d{other['id']}")
        if dev.get("id") is not None:
            dev_id = dev["id"]
            if not isinstance(dev_id, int) or not 0 <= dev_id < MAX_DEVS:
                raise RingBuilderError(f"invalid device id {dev_id!r}")
            if dev_id < len(self.devs) and self.devs[dev_id] is not None:
                raise RingBuilderError(f"duplicate device id {dev_id}")
        else:
            dev_id = next((i for i, d in enumerate(self.devs) if d is None), len(self.devs))
            if dev_id >= MAX_DEVS:
                raise RingBuilderError(f"too many devices: at most {MAX_DEVS}")
        while len(self.devs) <= dev_id:
            self.devs.append(None)
        clean["id"] = dev_id
        self.devs[dev_id] = clean
        self.devs_changed = True
        return dev_id

    def _dev(self, dev_id: int) -> dict[str, Any]:
        if not isinstance(dev_id, int) or not 0 <= dev_id < len(self.devs) \
                or self.devs[dev_id] is None or self.devs[dev_id].get("removed"):
            raise RingBuilderError(f"unknown device id {dev_id!r}")
        return self.devs[dev_id]

    def remove_dev(self, dev_id: int) -> None:
        """Mark for removal; the next rebalance moves its partitions away and forgets it."""
        dev = self._dev(dev_id)
        dev["removed"] = True
        self.devs_changed = True

    def set_dev_weight(self, dev_id: int, weight: float) -> None:
        self._dev(dev_id)["weight"] = parse_weight(weight)
        self.devs_changed = True

    def search_devs(self, value: str | dict[str, Any]) -> list[dict[str, Any]]:
        query = parse_search_value(value) if isinstance(value, str) else value
        return [dict(d) for d in self._live_devs() if matches(d, query)]

    # -- rebalance -----------------------------------------------------------------------------

    def _empty_tables(self) -> None:
        self._tables = [array("H", [NONE_DEV]) * self.parts for _ in range(self.replicas)]
        self._last_move = array("I", [0]) * self.parts

    def rebalance(self, seed: int | None = None) -> tuple[int, float]:
        """Reassign what must and what should move; returns (assignments moved, balance %)."""
        tiers = build_tiers(self.devs, self.replicas)
        active = len(tiers.path)
        if active == 0:
            raise RingBuilderError("no devices with weight > 0: add devices before rebalancing")
        if active < self.replicas:
            raise RingBuilderError(f"only {active} device(s) with weight > 0 for "
                                   f"{self.replicas} replicas: add devices")
        if not self._tables:
            self._empty_tables()
        before = [array("H", t) for t in self._tables]
        now = int(time.time())
        window = self.min_part_hours * 3600
        last = self._last_move

        def movable(p: int) -> bool:
            return not window or now - last[p] >= window

        placer = Placer(tiers, self._tables, self.parts, movable, random.Random(seed),
                        one_per_part=window > 0)
        placer.run()
        moved = 0
        for old, new in zip(before, self._tables, strict=True):
            if old != new:
                for p, (a, b) in enumerate(zip(old, new, strict=True)):
                    if a != b:
                        moved += 1
                        last[p] = now
        for i, d in enumerate(self.devs):
            if d is not None and d.get("removed"):
                self.devs[i] = None
        if moved or self.devs_changed:
            self.version += 1
        self.devs_changed = False
        return moved, self.get_balance()

    def pretend_min_part_hours_passed(self) -> None:
        self._last_move = array("I", [0]) * len(self._last_move)

    def min_part_seconds_left(self) -> int:
        if not self.min_part_hours or not len(self._last_move):
            return 0
        return max(0, max(self._last_move) + self.min_part_hours * 3600 - int(time.time()))

    # -- reports -------------------------------------------------------------------------------

    def part_counts(self) -> Counter:
        counts: Counter = Counter()
        for table in self._tables:
            counts.update(table)
        counts.pop(NONE_DEV, None)
        return counts

    def targets(self) -> dict[int, float]:
        """Ideal assignments per active device (weight, then clamped by dispersion)."""
        tiers = build_tiers(self.devs, self.replicas)
        return {d: tiers.target[path[-1]] * self.parts for d, path in tiers.path.items()}

    def dev_balances(self) -> dict[int, float]:
        """Per device: % above (+) or below (-) its ideal share; 999.99 for a device that holds
        partitions but should hold none."""
        counts = self.part_counts()
        targets = self.targets()
        out = {}
        for d in self._live_devs():
            t = targets.get(d["id"], 0.0)
            c = counts.get(d["id"], 0)
            if t > 0:
                out[d["id"]] = 100.0 * (c - t) / t
            else:
                out[d["id"]] = 999.99 if c else 0.0
        return out

    def get_balance(self) -> float:
        bal = self.dev_balances()
        return max((abs(b) for b in bal.values()), default=0.0)

    def is_balanced(self, percent: float = 1.0) -> bool:
        """Every device within `percent` of its ideal share, or within one partition where
        rounding makes that impossible."""
        counts = self.part_counts()
        targets = self.targets()
        for d in self._live_devs():
            t = targets.get(d["id"], 0.0)
            if abs(counts.get(d["id"], 0) - t) > max(t * percent / 100.0, 1.0):
                return False
        return True

    def _placer(self) -> Placer:
        tiers = build_tiers(self.devs, self.replicas)
        return Placer(tiers, self._tables, self.parts, lambda p: False, random.Random(0))

    def dispersion_report(self) -> dict[str, Any]:
        """How many partitions have replicas packed tighter than the topology requires."""
        if not self._tables:
            return {"parts": self.parts, "undispersed": 0, "percent": 0.0,
                    "by_level": dict.fromkeys(LEVELS, 0)}
        faults = self._placer().dispersion_faults(pick=False)
        by_level = dict.fromkeys(LEVELS, 0)
        for level, _p in faults:
            by_level[LEVELS[level - 1]] += 1
        return {"parts": self.parts, "undispersed": len(faults),
                "percent": 100.0 * len(faults) / self.parts, "by_level": by_level}

    def validate(self) -> None:
        """Raise RingBuilderError unless every partition has `replicas` distinct live devices."""
        if not self._tables:
            raise RingBuilderError("the builder has never been rebalanced")
        if len(self._tables) != self.replicas or \
                any(len(t) != self.parts for t in self._tables):
            raise RingBuilderError("replica tables do not match part_power and replicas")
        counts = self.part_counts()
        for d, _c in counts.items():
            if d >= len(self.devs) or self.devs[d] is None:
                raise RingBuilderError(f"partitions assigned to unknown device {d}")
        for r, table in enumerate(self._tables):
            if NONE_DEV in table:
                raise RingBuilderError(
                    f"partition {table.index(NONE_DEV)} replica {r} is unassigned")
        if self.replicas > 1:
            for p, ids in enumerate(zip(*self._tables, strict=True)):
                if len(set(ids)) < len(ids):
                    raise RingBuilderError(f"partition {p} has two replicas on one device")
        seen: dict[tuple, int] = {}
        for d in self._live_devs():
            key = (d["ip"], d["port"], d["device"])
            if key in seen:
                raise RingBuilderError(f"devices d{seen[key]} and d{d['id']} are the same disk")
            seen[key] = d["id"]

    # -- output and persistence ----------------------------------------------------------------

    def get_ring_data(self) -> RingData:
        if not self._tables:
            raise RingBuilderError("the builder has never been rebalanced")
        devs: list[dict[str, Any] | None] = []
        for d in self.devs:
            if d is None:
                devs.append(None)
            else:
                dev = {k: d[k] for k in DEV_KEYS}
                if d.get("meta"):
                    dev["meta"] = d["meta"]
                devs.append(dev)
        return RingData(self.part_power, self.replicas, devs,
                        [array("H", t) for t in self._tables])

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": 1, "part_power": self.part_power,
                "replicas": self.replicas, "min_part_hours": self.min_part_hours,
                "ring_version": self.version, "devs_changed": self.devs_changed,
                "devs": self.devs,
                "replica2part2dev": [_to_le(t) for t in self._tables],
                "last_part_moves": _to_le(self._last_move)}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RingBuilder:
        if not isinstance(raw, dict) or raw.get("format") != FORMAT:
            raise RingBuilderError("not a swiftlite builder file")
        b = cls(raw["part_power"], raw["replicas"], raw["min_part_hours"])
        b.devs = raw["devs"]
        b.version = raw.get("ring_version", 0)
        b.devs_changed = raw.get("devs_changed", False)
        b._tables = [_from_le("H", blob) for blob in raw["replica2part2dev"]]
        b._last_move = _from_le("I", raw["last_part_moves"])
        if b._tables and len(b._last_move) != b.parts:
            raise RingBuilderError("corrupt builder file: partition tables do not match")
        return b

    def save(self, path: str) -> None:
        """Atomically replace `path` (a crash leaves the old file or the new one, never half)."""
        # 0644: other tools read the builder too
        atomic_write(path, msgpack.packb(self.to_dict()), mode=0o644, prefix=".builder-")

    @classmethod
    def load(cls, path: str) -> RingBuilder:
        try:
            with open(path, "rb") as f:
                raw = msgpack.unpackb(f.read())
        except FileNotFoundError:
            raise RingBuilderError(f"builder file {path} does not exist") from None
        except (ValueError, msgpack.UnpackException) as exc:
            raise RingBuilderError(f"cannot read builder file {path}: {exc}") from None
        try:
            return cls.from_dict(raw)
        except (KeyError, TypeError) as exc:
            raise RingBuilderError(f"corrupt builder file {path}: {exc}") from None


def ideal_parts(b: RingBuilder) -> dict[int, float]:
    """parts * replicas * weight / total weight, per device with weight (pure weight share)."""
    live = [d for d in b._live_devs() if d["weight"] > 0]
    total = math.fsum(d["weight"] for d in live)
    return {d["id"]: b.parts * b.replicas * d["weight"] / total for d in live}
