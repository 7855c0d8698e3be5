"""Whole objects out of and into erasure-coded policies, for the container-reconciler.

The proxy streams EC bodies (proxy/ec_put.py, proxy/ec_get.py); the reconciler moves one
object at a time and already holds bodies whole (images), so here a body is decoded from the
archives the source's primaries answered, or encoded into the k + m archives (each followed by
its footer: obj/engine/ec_archive.py's backend protocol) for the destination's. Blocking arithmetic:
call through the thread pool.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from multidict import CIMultiDict

from swiftlite.common.ec import KEYS, ArchiveInfo, ECError, ECScheme, Encoder, decode_body
from swiftlite.common.timestamp import Timestamp, from_header
from swiftlite.obj.engine import pack_footer

_EC_KEYS = frozenset(k.lower() for k in KEYS)


def decode_newest(answers: list[tuple[Mapping[str, str], bytes]],
                  ) -> tuple[CIMultiDict[str], bytes] | None:
    """(headers, body) of the newest version among archive GET answers (headers, archive),
    the headers as a replica's would be (the body's ETag and length, no EC sysmeta); None
    when fewer than k of its archives answered or they do not decode to its ETag (a later
    pass tries again: the reconstructor or a late commit may have filled them in)."""
    versions: dict[Timestamp, dict[int, tuple[Mapping[str, str], bytes, ArchiveInfo]]] = {}
    for headers, archive in answers:
        ts = from_header(headers.get("X-Backend-Timestamp"))
        try:
            info = ArchiveInfo.from_metadata(headers)
        except ECError:
            continue  # not an archive (a stray replica's file): nothing to decode
        if ts is not None:
            versions.setdefault(ts, {})[info.frag_index] = (headers, archive, info)
    if not versions:
        return None
    got = versions[max(versions)]
    first, _, info = next(iter(got.values()))
    if len(got) < info.scheme.k:
        return None
    try:
        body = decode_body(info.scheme, info.body_length, {i: a for i, (_, a, _) in got.items()})
    except (ECError, ValueError):
        return None
    if hashlib.md5(body).hexdigest() != info.etag:
        return None
    out: CIMultiDict[str] = CIMultiDict((k, v) for k, v in first.items()
                                        if k.lower() not in _EC_KEYS)
    out["ETag"] = info.etag
    out["Content-Length"] = str(len(body))
    return out, body


def encode_archives(scheme: ECScheme, body: bytes) -> list[bytes]:
    """The k + m PUT bodies for `body`: archive i with its footer, for the ring's i-th
    primary."""
    enc = Encoder(scheme, archive_md5=False)  # the object servers compute those
    pieces: list[list[Any]] = [[] for _ in range(scheme.n)]
    for out in (enc.feed(body), enc.finish()):
        for i, piece in enumerate(out):
            pieces[i].append(piece)
    return [b"".join(p) + pack_footer(enc.footer_metadata(i)) for i, p in enumerate(pieces)]
