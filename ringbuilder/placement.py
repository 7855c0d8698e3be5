"""One rebalance: assign partition-replicas to devices by tier targets, moving as little as it can.

Tables are `array('H')` per replica (index = partition, value = device id, NONE_DEV = hole);
the hot loops touch ints only. Steps:
  1. holes and assignments on removed / zero-weight devices are placed (always allowed);
  2. partitions spread worse than the topology allows get one replica re-placed;
  3. devices above their quota hand partitions to devices below theirs, one at a time, each
     move checked to land on a needy device without hurting dispersion.
Steps 2 and 3 honour min_part_hours and move at most one replica of a partition per run.
"""

from __future__ import annotations

import random
from array import array
from collections import Counter
from collections.abc import Callable

from ringbuilder.tiers import Tiers, node_quotas

NONE_DEV = 0xFFFF
BALANCE_ROUNDS = 6


class Placer:
    def __init__(self, tiers: Tiers, tables: list[array], parts: int,
                 movable: Callable[[int], bool], rng: random.Random,
                 one_per_part: bool = True) -> None:
        self.t = tiers
        self.tables = tables
        self.parts = parts
        self.replicas = len(tables)
        self.movable = movable
        self.rng = rng
        # With min_part_hours > 0 a partition moves at most one replica per rebalance.
        self.touched = bytearray(parts)
        self.one_per_part = one_per_part
        # Slots re-placed in this run, per replica: moving one again costs no extra movement.
        self.fresh = [bytearray(parts) for _ in tables]
        self.active = set(tiers.path)
        self.wanted: list[int] = []
        # Paths without the root (which every replica shares), and for every node the children
        # of the first descendant that branches, so the descent skips single-child tiers.
        self.paths = {d: path[1:] for d, path in tiers.path.items()}
        self.branch: list[list[int]] = []
        self.leaf: list[int] = []
        for node in range(len(tiers.level)):
            n = node
            while len(tiers.children[n]) == 1:
                n = tiers.children[n][0]
            self.branch.append(tiers.children[n])
            self.leaf.append(tiers.dev_of[n])

    # -- bookkeeping ---------------------------------------------------------------------------

    def _unassign(self, r: int, p: int) -> None:
        d = self.tables[r][p]
        self.tables[r][p] = NONE_DEV
        path = self.t.path.get(d)
        if path is not None:
            wanted = self.wanted
            for n in path:
                wanted[n] += 1

    def _assign(self, r: int, p: int, d: int) -> None:
        self.tables[r][p] = d
        wanted = self.wanted
        for n in self.t.path[d]:
            wanted[n] -= 1

    def _others(self, r: int, p: int) -> list[int]:
        return [tb[p] for i, tb in enumerate(self.tables) if i != r and tb[p] != NONE_DEV]

    def choose(self, others: list[int]) -> int:
        """Device for one more replica of a partition whose other replicas are on `others`:
        at each tier the child holding the fewest of them, then the one wanting most."""
        used: tuple[int, ...] = ()
        paths = self.paths
        for d in others:
            used += paths[d]
        return self._descend(used)

    def _descend(self, used: tuple[int, ...]) -> int:
        branch, wanted = self.branch, self.wanted
        want = wanted.__getitem__
        node = 0
        while True:
            kids = branch[node]
            if not kids:
                return self.leaf[node]
            best = max(kids, key=want)
            if not used or best not in used:  # the usual case: no filtering needed
                node = best
                continue
            free = [k for k in kids if k not in used]
            if free:
                node = max(free, key=want)
            else:
                ndevs, maxrep = self.t.ndevs, self.t.maxrep
                count = used.count
                node = min(kids, key=lambda k: (count(k) >= ndevs[k], count(k) >= maxrep[k],
                                                count(k), -wanted[k]))

    def _fill(self, r: int, plist: list[int]) -> None:
        """Place replica r of every partition in plist (the hot loop of a first rebalance)."""
        table = self.tables[r]
        others_t = [tb for i, tb in enumerate(self.tables) if i != r]
        paths, tpaths, wanted, descend = self.paths, self.t.path, self.wanted, self._descend
        fresh = self.fresh[r]
        for p in plist:
            used: tuple[int, ...] = ()
            for tb in others_t:
                o = tb[p]
                if o != NONE_DEV:
                    used += paths[o]
            d = descend(used)
            table[p] = d
            for n in tpaths[d]:
                wanted[n] -= 1
            fresh[p] = 1

    # -- the run -------------------------------------------------------------------------------

    def run(self) -> None:
        t, parts, tables = self.t, self.parts, self.tables
        # 1. holes and assignments on devices that left the tiers
        forced: list[list[int]] = [[] for _ in tables]
        touched = self.touched
        for r, table in enumerate(tables):
            gone = {d for d in set(table) if d not in self.active}
            if gone:
                plist = forced[r] = [p for p, d in enumerate(table) if d in gone]
                for p in plist:
                    table[p] = NONE_DEV
                    touched[p] = 1
        node_counts: dict[int, int] = {}
        for table in tables:
            for d, c in Counter(table).items():
                if d != NONE_DEV:
                    for n in t.path[d]:
                        node_counts[n] = node_counts.get(n, 0) + c
        quota = node_quotas(t, parts, node_counts)
        self.quota = quota
        self.wanted = [q - node_counts.get(n, 0) for n, q in enumerate(quota)]
        # Replica-major order with a shuffle per replica keeps co-located pairs random.
        for r, plist in enumerate(forced):
            self.rng.shuffle(plist)
            self._fill(r, plist)
        # 2. dispersion
        for r, p in self.dispersion_faults(pick=True):
            if (self.one_per_part and self.touched[p]) or not self.movable(p):
                continue
            self.touched[p] = 1
            self._unassign(r, p)
            self._assign(r, p, self.choose(self._others(r, p)))
            self.fresh[r][p] = 1
        # 3. balance
        for _ in range(BALANCE_ROUNDS):
            if not self._balance_round():
                break

    def _balance_round(self) -> bool:
        t, wanted = self.t, self.wanted
        over = {d for d, path in t.path.items() if wanted[path[-1]] < 0}
        if not over:
            return False
        holdings: dict[int, list[tuple[int, int]]] = {d: [] for d in over}
        for r, table in enumerate(self.tables):
            for p, d in enumerate(table):
                if d in over:
                    holdings[d].append((r, p))
        moved = 0
        fresh = self.fresh
        for d in sorted(over, key=lambda d: (wanted[t.path[d][-1]], d)):
            dn = t.path[d][-1]
            cand = holdings[d]
            self.rng.shuffle(cand)
            cand.sort(key=lambda rp: not fresh[rp[0]][rp[1]])  # stable: fresh first, shuffled
            budget = max(500, -20 * wanted[dn])
            for r, p in cand:
                if wanted[dn] >= 0 or budget <= 0:
                    break
                if not fresh[r][p] and ((self.one_per_part and self.touched[p])
                                            or not self.movable(p)):
                    continue
                budget -= 1
                self._unassign(r, p)
                best = self.choose(self._others(r, p))
                if best != d and wanted[t.path[best][-1]] > 0:
                    self._assign(r, p, best)
                    self.touched[p] = 1
                    fresh[r][p] = 1
                    moved += 1
                else:
                    self._assign(r, p, d)
        return moved > 0

    # -- dispersion ----------------------------------------------------------------------------

    def dispersion_faults(self, pick: bool = False) -> list[tuple[int, int]]:
        """Partitions holding more replicas in some tier node than the topology requires,
        as (replica to move, partition); with pick=False the replica is the level (1..4)."""
        t, tables = self.t, self.tables
        found: dict[int, int] = {}
        for level in range(1, 5):
            nodes = t.nodes_at(level)
            if all(t.maxrep[n] >= self.replicas for n in nodes):
                continue
            lid = {d: path[level] for d, path in t.path.items()}
            # Devices outside the tiers (or holes) never collide with anything.
            rows = [[lid.get(d, -1 - d) for d in table] for table in tables]
            if all(t.maxrep[n] == 1 for n in nodes):
                bad = [p for p, ids in enumerate(zip(*rows, strict=True))
                       if len(set(ids)) < len(ids)]
            else:
                maxrep = t.maxrep
                bad = []
                for p, ids in enumerate(zip(*rows, strict=True)):
                    c = Counter(ids)
                    if any(k >= 0 and v > maxrep[k] for k, v in c.items()):
                        bad.append(p)
            for p in bad:
                if p in found:
                    continue
                found[p] = self._worst_replica(p, rows, level) if pick else level
        return [(r, p) for p, r in sorted(found.items())]

    def _worst_replica(self, p: int, rows: list[list[int]], level: int) -> int:
        ids = [row[p] for row in rows]
        c = Counter(ids)
        maxrep = self.t.maxrep
        crowded = [r for r, k in enumerate(ids) if k >= 0 and c[k] > maxrep[k]]
        wanted, path = self.wanted, self.t.path
        return min(crowded, key=lambda r: (wanted[path[self.tables[r][p]][-1]], -r))
