"""The object auditor: read every object slowly, quarantine bad copies, re-derive digests.

Each pass walks every partition of every device under ``devices``. For each object it reads
the current files (at most ``max_bytes_per_second``, ``max_files_per_second``): a .data's body
must match its ETag and Content-Length and its metadata must carry name, X-Timestamp, ETag;
a .ts/.meta must have a readable trailer. A bad object's hash dir moves to
``quarantined/objects/`` through ``reading.quarantine``, which updates the suffix digest, so
the replicator sees the difference and restores a good copy from a peer. Tombstones older than
``reclaim_age`` are removed on the way. As a safety net against digest drift, the digests of
``rehash_partitions_per_pass`` partitions per device (round-robin) are re-derived per pass.

A second safety net, for the expiring queue (``expiring``): every sound object whose current
metadata (.data, and .meta over it) carries X-Delete-At is queued again, in one journal
append per suffix. The trailer is read anyway, so this costs nothing for other objects; a
queue entry lost in a crash (a kill between an object's rename and its record) comes back
within one audit cycle, and duplicates collapse in the queue.

A third, for the state hint reads follow (``fileformat.HINT_XATTR``): a hash dir whose hint
does not name its current files (written before hints, a crash between a hint and its rename,
a file copied in by hand) gets it set again, under the writers' lock (``hints`` in the stats).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from swiftlite.common import policies
from swiftlite.common.config import Section
from swiftlite.common.runtime import daemon
from swiftlite.common.threadpool import run_blocking
from swiftlite.obj import sync
from swiftlite.obj.engine import bodysum, digests, expiring, fileformat, reading

log = logging.getLogger("swiftlite.object-auditor")
NAME = "object-auditor"
READ = 1024 * 1024
REQUIRED = ("name", "X-Timestamp", "ETag", "Content-Length")


def _listdir(path: str) -> list[str]:
    return sorted(fileformat.listdir(path))


def check_file(path: str) -> tuple[bool, int, dict[str, str] | None]:
    """(file is sound, bytes read, its metadata or None when unreadable or gone).
    Blocking; reads the whole file."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return True, 0, None  # replaced since the listing: the newer file is checked next pass
    try:
        size = os.fstat(fd).st_size
        try:
            md, body_len = fileformat.read_fd_metadata(fd, size)
        except fileformat.CorruptFile:
            return False, 0, None
        if not path.endswith(".data"):
            return "X-Timestamp" in md, size - body_len, md
        if any(k not in md for k in REQUIRED) or md["Content-Length"] != str(body_len):
            return False, size - body_len, md
        sums = bodysum.Summer()
        off = 0
        while off < body_len:
            chunk = os.pread(fd, min(READ, body_len - off), off)
            if not chunk:
                return False, off, md
            sums.update(chunk)
            off += len(chunk)
        return bodysum.all_ok(sums, md), size, md
    finally:
        os.close(fd)


def audit_suffix(device_path: str, part: int, suffix: str,
                 reclaim_age: float) -> dict[str, int]:
    """Audit every object of one suffix dir (one thread hop)."""
    out = {"objects": 0, "quarantined": 0, "bytes": 0, "reclaimed": 0, "expiring": 0,
           "hints": 0}
    sdir = os.path.join(fileformat.part_dir(device_path, part), suffix)
    queued: list[expiring.Entry] = []
    for h in _listdir(sdir):
        if len(h) != 32:
            continue
        hdir = os.path.join(sdir, h)
        names = _listdir(hdir)
        state = fileformat.state_of(names)
        if not state:
            continue
        out["objects"] += 1
        if sync.tombstone_expired(state, reclaim_age):
            out["reclaimed"] += sync.remove_if_unchanged(device_path, part, h, state)
            continue
        names = state.split("|")
        if fileformat.read_hint(hdir) != names:
            try:
                out["hints"] += reading.refresh_hint(device_path, part, h)
            except OSError:
                log.exception("could not set the state hint of %s", hdir)
        merged: dict[str, str] | None = None
        for name in names:
            ok, n, md = check_file(os.path.join(hdir, name))
            out["bytes"] += n
            if not ok:
                log.error("quarantining %s/%s (bad %s)", hdir, name, name.rsplit(".", 1)[1])
                if reading.quarantine(device_path, part, h):
                    out["quarantined"] += 1
                merged = None
                break
            if name.endswith(".data"):
                merged = md
            elif name.endswith(".meta") and merged is not None and md is not None:
                merged = fileformat.merge_metadata(merged, md)
        if merged and "X-Delete-At" in merged:
            entry = expiring.entry_for(part, h, merged)
            if entry is not None:
                queued.append(entry)
    if queued:
        try:
            expiring.append(device_path, queued)
            out["expiring"] += len(queued)
        except OSError:
            log.exception("could not queue %d expiring objects of %s", len(queued), sdir)
    return out


class Auditor:
    def __init__(self, conf: Section) -> None:
        self.conf = conf
        self.devices = conf.get_str("devices", "/srv/node")
        self.reclaim_age = conf.get_float("reclaim_age", 7 * 86400.0)
        self.rehash_per_pass = conf.get_int("rehash_partitions_per_pass", 4)
        self.pacer = daemon.Pacer(conf.get_float("max_files_per_second", 20.0),
                                  conf.get_size("max_bytes_per_second", 10 * 1024 * 1024))
        self._rehash_next: dict[str, int] = {}  # device -> index of next partition to rehash

    def _walk(self) -> tuple[list[tuple[str, int, list[str]]], int]:
        """(device, partition, suffixes) to audit, and how many stale digest temp files
        (left by a crash) the partition listings found and removed. Every storage policy's
        data dir (`objects`, `objects-N`) is walked; its partitions carry their policy."""
        out = []
        removed = 0
        for d in _listdir(self.devices):
            dev_path = os.path.join(self.devices, d)
            for datadir in _listdir(dev_path):
                index = policies.index_of_datadir(datadir)
                if index is None:
                    continue
                for p in _listdir(os.path.join(dev_path, datadir)):
                    if p.isdigit():
                        part = fileformat.policy_part(p, index)
                        names = _listdir(fileformat.part_dir(dev_path, part))
                        out.append((dev_path, part, [s for s in names if len(s) == 3]))
                        removed += digests.clean_stale_temps(dev_path, part, names)
        return out, removed

    async def run_pass(self, stats: dict[str, Any]) -> None:
        for k in ("quarantined", "bytes", "reclaimed", "rehashed", "expiring", "hints"):
            stats[k] = 0
        work, stats["temp_removed"] = await run_blocking(self._walk)
        for dev_path, part, sufs in work:
            stats["partitions"] += 1
            for s in sufs:
                res = await run_blocking(audit_suffix, dev_path, part, s, self.reclaim_age)
                for k in ("objects", "quarantined", "bytes", "reclaimed", "expiring", "hints"):
                    stats[k] += res[k]
                await self.pacer.pace(res["objects"], res["bytes"])
        await self._rehash_some(work, stats)

    async def _rehash_some(self, work: list[tuple[str, int, list[str]]],
                           stats: dict[str, Any]) -> None:
        by_dev: dict[str, list[tuple[int, list[str]]]] = {}
        for dev_path, part, sufs in work:
            by_dev.setdefault(dev_path, []).append((part, sufs))
        for dev_path, parts in by_dev.items():
            start = self._rehash_next.get(dev_path, 0) % len(parts)
            for i in range(min(self.rehash_per_pass, len(parts))):
                part, sufs = parts[(start + i) % len(parts)]
                before = await run_blocking(digests.get_digests, dev_path, part)
                after = await run_blocking(digests.rehash_suffixes, dev_path, part,
                                           sorted(set(sufs) | set(before)))
                if after != before:
                    log.warning("digest drift healed in %s/objects/%s", dev_path, part)
                    stats["rehashed"] += 1
            self._rehash_next[dev_path] = start + self.rehash_per_pass


def run_daemon(conf: Section, once: bool = False) -> int:
    aud = Auditor(conf)
    return daemon.run(conf, NAME, aud.run_pass, once)
