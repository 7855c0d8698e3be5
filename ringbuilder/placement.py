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

import itertools
import random
from array import array
from collections import Counter
from collections.abc import Callable, Iterator

from ringbuilder.tiers import Tiers, node_quotas

NONE_DEV = 0xFFFF


def _lazy_shuffle(items: list, rng: random.Random) -> Iterator:
    """Items in random order, paying only for the ones consumed (Fisher-Yates, lazily)."""
    n = len(items)
    rand = rng.random  # randrange is several times slower per call
    for i in range(n):
        j = i + int(rand() * (n - i))
        items[i], items[j] = items[j], items[i]
        yield items[i]
BALANCE_ROUNDS = 6
PLACEMENT_TRIES = 5
RETRY_LIMIT = 100_000  # forced slots; a first rebalance of a big ring is placed once


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
        # Rounding-sized imbalance left by the greedy end-game can only be fixed by moving
        # more than must move; a few fresh tries of the cheap steps usually avoid that.
        small = sum(map(len, forced)) <= RETRY_LIMIT
        saved = self._save() if small else None
        for attempt in range(PLACEMENT_TRIES if small else 1):
            if attempt:
                self._restore(saved)
            self._place_and_settle(forced)
            if self._within_tolerance():
                return
        # Still off by more than the tolerance: allow chains of rounding-sized moves too.
        for _ in range(BALANCE_ROUNDS):
            if not self._balance_round(strict=False):
                break

    def _save(self) -> tuple:
        return ([array("H", tb) for tb in self.tables], list(self.wanted),
                [bytearray(f) for f in self.fresh], bytearray(self.touched))

    def _restore(self, saved: tuple) -> None:
        tables, wanted, fresh, touched = saved
        for r, tb in enumerate(tables):
            self.tables[r][:] = tb
        self.wanted[:] = wanted
        for r, f in enumerate(fresh):
            self.fresh[r][:] = f
        self.touched[:] = touched

    def _place_and_settle(self, forced: list[list[int]]) -> None:
        # Replica-major order with a shuffle per replica keeps co-located pairs random.
        for r, plist in enumerate(forced):
            plist = list(plist)
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
        # 3. balance, first only with moves that fix more than rounding (so that removing a
        # device moves just what it held)
        for _ in range(BALANCE_ROUNDS):
            if not self._balance_round(strict=True):
                break
        if not self._within_tolerance():
            self._relay()

    def _within_tolerance(self) -> bool:
        t, parts, quota, wanted = self.t, self.parts, self.quota, self.wanted
        for path in t.path.values():
            n = path[-1]
            exact = t.target[n] * parts
            if abs(quota[n] - wanted[n] - exact) > max(0.01 * exact, 1.0):
                return False
        return True

    def _relay(self, tries: int = 20) -> None:
        """Two-hop moves that cost no extra movement: a slot already moving this run goes
        from an over-quota device X to a device Z, and another such slot on Z goes on to a
        needy device Y (when dispersion keeps X's slot from reaching Y directly)."""
        t, wanted, tables, parts = self.t, self.wanted, self.tables, self.parts
        devnode = {d: path[-1] for d, path in t.path.items()}
        by_dev: dict[int, list[tuple[int, int]]] = {}
        for r, fr in enumerate(self.fresh):
            if any(fr):
                table = tables[r]
                for p in range(parts):
                    if fr[p]:
                        by_dev.setdefault(table[p], []).append((r, p))
        for x in sorted(by_dev, key=lambda d: (wanted[devnode[d]], d)):
            if x not in devnode or wanted[devnode[x]] >= 0:
                continue
            mine = by_dev[x]
            self.rng.shuffle(mine)
            for r1, p1 in list(mine[:tries]):
                if wanted[devnode[x]] >= 0:
                    break
                self._unassign(r1, p1)
                z = self.choose(self._others(r1, p1))
                if z == x:
                    self._assign(r1, p1, x)
                    continue
                self._assign(r1, p1, z)
                done = wanted[devnode[z]] >= 0  # z was needy itself: a direct move
                for r2, p2 in by_dev.get(z, [])[:tries]:
                    if done:
                        break
                    if p2 == p1:
                        continue
                    self._unassign(r2, p2)
                    y = self.choose(self._others(r2, p2))
                    if y != z and wanted[devnode[y]] > 0:
                        self._assign(r2, p2, y)
                        by_dev[z].remove((r2, p2))
                        by_dev.setdefault(y, []).append((r2, p2))
                        done = True
                    else:
                        self._assign(r2, p2, z)
                if done:
                    mine.remove((r1, p1))
                    by_dev.setdefault(z, []).append((r1, p1))
                else:
                    self._unassign(r1, p1)
                    self._assign(r1, p1, x)

    def _balance_round(self, strict: bool) -> bool:
        """Walk slots in random order (slots already moving in this run first, since moving
        them again costs nothing) and hand each on an over-quota device to a needy one."""
        t, wanted, tables = self.t, self.wanted, self.tables
        devnode = {d: path[-1] for d, path in t.path.items()}
        over = {d for d, n in devnode.items() if wanted[n] < 0}
        if not over:
            return False
        fresh, touched, movable = self.fresh, self.touched, self.movable
        one_per_part = self.one_per_part
        parts = self.parts
        first = [r * parts + p for r, fr in enumerate(fresh) if any(fr)
                 for p, f in enumerate(fr) if f]
        self.rng.shuffle(first)
        slots = itertools.chain(first, (-1,), _lazy_shuffle(list(range(parts * len(tables))),
                                                            self.rng))
        quota, exact = self.quota, [x * parts for x in t.target]

        def off(n: int) -> float:  # how far a device node sits above its exact share
            return quota[n] - wanted[n] - exact[n]

        # In strict mode a new movement must fix more than rounding plus the odd partition
        # dispersion forced aside: the source or the target at least two partitions off.
        # Devices that far short; while any remain, every over-quota device may give.
        far = {n for n in devnode.values() if off(n) <= -2}
        fresh_phase = True

        def may_give(d: int) -> bool:
            n = devnode[d]
            return wanted[n] < 0 and (not strict or fresh_phase or bool(far) or off(n) >= 2)

        moved = 0
        for slot in slots:
            if slot < 0:  # slots already moving are done; the rest cost new movement
                fresh_phase = False
                over = {o for o in over if may_give(o)}
                if not over:
                    break
                continue
            r, p = divmod(slot, parts)
            d = tables[r][p]
            if d not in over:
                continue
            if not fresh[r][p] and ((one_per_part and touched[p]) or not movable(p)):
                continue
            self._unassign(r, p)
            best = self.choose(self._others(r, p))
            bn, dn = devnode[best], devnode[d]
            if best != d and wanted[bn] > 0 and (
                    fresh[r][p] or not strict or off(dn) >= 2 or off(bn) <= -2):
                self._assign(r, p, best)
                touched[p] = 1
                fresh[r][p] = 1
                moved += 1
                if bn in far and off(bn) > -2:
                    far.discard(bn)
                    if not far:
                        over = {o for o in over if may_give(o)}
                if not may_give(d):
                    over.discard(d)
                if not over:
                    break
            else:
                self._assign(r, p, d)
        return moved > 0

    # -- dispersion ----------------------------------------------------------------------------

    def dispersion_faults(self, pick: bool = False) -> list[tuple[int, int]]:
        """Partitions holding more replicas in some tier node than the topology requires,
        as (replica to move, partition); with pick=False the replica is the level (1..4)."""
        t, tables = self.t, self.tables
        found: dict[int, int] = {}
        # lid[d] = d's node at a level; devices outside the tiers (and holes) get a unique
        # negative id so they never collide with anything.
        lid = [-1 - d for d in range(NONE_DEV + 1)]
        for level in range(1, 5):
            nodes = t.nodes_at(level)
            if all(t.maxrep[n] >= self.replicas for n in nodes):
                continue
            for d, path in t.path.items():
                lid[d] = path[level]
            rows = [list(map(lid.__getitem__, table)) for table in tables]
            if all(t.maxrep[n] == 1 for n in nodes):
                n_rep = len(rows)
                bad = [p for p, ids in enumerate(zip(*rows, strict=True))
                       if len(set(ids)) < n_rep]
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
            if all(t.maxrep[n] == 1 for n in nodes):
                break  # distinct here implies distinct in every tier below
        return [(r, p) for p, r in sorted(found.items())]

    def _worst_replica(self, p: int, rows: list[list[int]], level: int) -> int:
        ids = [row[p] for row in rows]
        c = Counter(ids)
        maxrep = self.t.maxrep
        crowded = [r for r, k in enumerate(ids) if k >= 0 and c[k] > maxrep[k]]
        wanted, path = self.wanted, self.t.path
        return min(crowded, key=lambda r: (wanted[path[self.tables[r][p]][-1]], -r))
