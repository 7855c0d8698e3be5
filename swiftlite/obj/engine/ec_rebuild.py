"""Rebuilding one fragment archive from k others (the reconstructor's disk and codec work).

Blocking, pure of I/O except `frag_indexes`: call through the thread pool. Sources are whole
object files as peers keep them (``archive || trailer``, see ``fileformat``); each is checked
against its own metadata (length and MD5 of the archive, `ArchiveInfo.check_archive`) before
it is used, so a corrupt peer archive is skipped rather than decoded into wrong bytes. The
archive made is checked twice: the decoded body must have the object's ETag, and the new
archive is written with its own MD5 and body sums, so the receiving write (``sync``'s
``store_whole``) and the auditor check it like any other file.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass

from swiftlite.common.ec import ArchiveInfo, ECError, decode_segments
from swiftlite.common.ec.meta import EC_ARCHIVE_ETAG, EC_FRAG_INDEX
from swiftlite.common.fsutil import atomic_write
from swiftlite.obj.engine import bodysum, digests, fileformat


class RebuildError(Exception):
    """Not enough consistent source archives, or a rebuild that does not check out."""


@dataclass(frozen=True)
class Source:
    info: ArchiveInfo
    metadata: dict[str, str]
    archive: memoryview


def parse_source(data: bytes) -> Source | None:
    """A fetched .data file as a source archive, or None when it does not check out."""
    try:
        res = fileformat.parse_tail(data, len(data))
        if not isinstance(res, tuple):
            return None
        md, body_len = res
        info = ArchiveInfo.from_metadata(md)
        archive = memoryview(data)[:body_len]
        info.check_archive(archive)
    except (fileformat.CorruptFile, ECError):
        return None
    return Source(info, md, archive)


def _same_version(a: ArchiveInfo, b: ArchiveInfo) -> bool:
    return (a.scheme, a.body_length, a.etag) == (b.scheme, b.body_length, b.etag)


def usable(sources: Mapping[int, Source]) -> dict[int, Source]:
    """The sources (fragment index -> source) that agree with the first on the object."""
    if not sources:
        return {}
    first = next(iter(sources.values())).info
    return {i: s for i, s in sources.items() if _same_version(s.info, first)}


def rebuild(index: int, sources: Mapping[int, Source]) -> bytes:
    """The whole object file (archive `index` and its trailer) from k or more sources of
    one version. RebuildError if they cannot give it."""
    good = usable(sources)
    if not good:
        raise RebuildError("no source archives")
    first = next(iter(good.values()))
    scheme = first.info.scheme
    if len(good) < scheme.k:
        raise RebuildError(f"{len(good)} consistent source archives of the {scheme.k} needed")
    body_md5 = hashlib.md5()
    pieces: list[bytes] = []
    try:
        for segment in decode_segments(scheme, first.info.body_length,
                                       {i: s.archive for i, s in good.items()}):
            body_md5.update(segment)
            # Encoding is deterministic: the fragment made is the one first written.
            pieces.append(scheme.encode_segment(segment)[index])
    except ECError as exc:
        raise RebuildError(str(exc)) from exc
    if body_md5.hexdigest() != first.info.etag:
        raise RebuildError("decoded body does not match the object's ETag")
    archive = b"".join(pieces)
    sums = bodysum.Summer()
    sums.feed([archive])
    info = ArchiveInfo(scheme, first.info.body_length, index, first.info.etag, sums.etag)
    drop = {k.lower() for k in (EC_FRAG_INDEX, EC_ARCHIVE_ETAG, "ETag", bodysum.CHECK_KEY)}
    md = {k: v for k, v in first.metadata.items() if k.lower() not in drop}
    md.update({EC_FRAG_INDEX: str(index), EC_ARCHIVE_ETAG: info.archive_etag,
               "ETag": sums.etag, bodysum.CHECK_KEY: sums.check,
               "Content-Length": str(len(archive))})
    return archive + fileformat.pack_trailer(md)


INDEX_MARK = "ec-index"  # in a partition dir: the fragment index its archives were checked for


def index_checked(device_path: str, part: int | str) -> int | None:
    """The fragment index this partition's archives were last found to hold (None: never
    checked here)."""
    try:
        with open(os.path.join(fileformat.part_dir(device_path, part), INDEX_MARK)) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def mark_index(device_path: str, part: int | str, index: int) -> None:
    """Remember that the partition's archives are of `index` (lost with the partition)."""
    path = os.path.join(fileformat.part_dir(device_path, part), INDEX_MARK)
    try:
        # A temp file a crash leaves is a digests temp to the auditor's sweep.
        atomic_write(path, str(index).encode(), fsync=False,
                     prefix=digests.TEMP_PREFIXES[1])
    except FileNotFoundError:
        pass  # the partition went meanwhile (a handoff emptied): nothing to remember


def other_index_archives(device_path: str, part: int | str, index: int
                         ) -> tuple[dict[str, dict[str, str]], dict[str, int | None]] | None:
    """Every object of the partition (one full listing) whose archive is not of `index`:
    ({suffix: {hash: state}}, {hash: its fragment index}); None without a partition dir."""
    states: dict[str, dict[str, str]] = {}
    found: dict[str, int | None] = {}
    try:
        suffixes = [s for s in os.listdir(fileformat.part_dir(device_path, part))
                    if len(s) == 3]
    except FileNotFoundError:
        return None
    for s in suffixes:
        listed = digests.object_states(device_path, part, s)
        datas = [(h, st.split("|")[0]) for h, st in listed.items()
                 if st.split("|")[0].endswith(".data")]
        for h, i in frag_indexes(device_path, part, datas).items():
            if i is not None and i != index:
                states.setdefault(s, {})[h] = listed[h]
                found[h] = i
    return states, found


def frag_indexes(device_path: str, part: int | str,
                 files: list[tuple[str, str]]) -> dict[str, int | None]:
    """{hash: fragment index} of local .data files (None: unreadable or not an archive,
    which the auditor quarantines)."""
    out: dict[str, int | None] = {}
    for h, name in files:
        path = os.path.join(fileformat.hash_dir(device_path, part, h), name)
        try:
            md, _ = fileformat.read_file_metadata(path)
            out[h] = ArchiveInfo.from_metadata(md).frag_index
        except (OSError, fileformat.CorruptFile, ECError):
            out[h] = None
    return out
