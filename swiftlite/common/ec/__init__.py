"""Erasure coding (issue 39): the codec the proxy and object servers will use for EC policies.

- scheme.py: `ECScheme` (k + m, ec_type, segment size), its per-process pyeclib driver;
- layout.py: where segments sit in the fragment archives, and the archive bytes of a range;
- encode.py: `Encoder`, a body streamed in, the k + m archives' bytes out;
- meta.py: `ArchiveInfo`, what each archive stores as sysmeta (`X-Object-Sysmeta-Ec-*`);
- decode.py: segments, ranges or bodies from any k archives, corrupt fragments skipped.

Served for `erasure_coding` storage policies (policies.py): the proxy encodes and decodes
(proxy/ec_put.py, proxy/ec_get.py), object servers store archives (obj/engine/ec_archive.py).
"""

from swiftlite.common.ec.decode import (
    ArchiveReader,
    decode_body,
    decode_range,
    decode_segment,
    decode_segments,
    fragment_problem,
)
from swiftlite.common.ec.encode import Encoder
from swiftlite.common.ec.layout import Layout, RangePlan
from swiftlite.common.ec.meta import KEYS, ArchiveInfo, ECMetadataError
from swiftlite.common.ec.scheme import (
    DEFAULT_EC_TYPE,
    DEFAULT_SEGMENT_SIZE,
    ECDecodeError,
    ECError,
    ECScheme,
    available_ec_types,
)

__all__ = [
    "DEFAULT_EC_TYPE", "DEFAULT_SEGMENT_SIZE", "KEYS", "ArchiveInfo", "ArchiveReader",
    "ECDecodeError", "ECError", "ECMetadataError", "ECScheme", "Encoder", "Layout", "RangePlan",
    "available_ec_types", "decode_body", "decode_range", "decode_segment", "decode_segments",
    "fragment_problem",
]
