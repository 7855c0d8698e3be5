"""The EC paths that skip a step when they safely can: fragments checked and data
fragments joined in Python (common/ec/frag_header.py), fragments read as views of what
arrived (proxy/ec_get.py), and container updates sent by only some commits
(proxy/ec_put.py)."""

from __future__ import annotations

import asyncio
import itertools
import random

import pytest

from swiftlite.common.ec import ECScheme, frag_header
from swiftlite.common.ec.decode import decode_checked, fragment_problem
from swiftlite.proxy.ec_put import update_senders
from swiftlite.ring import quorum_size

TYPES = ["liberasurecode_rs_vand", "isa_l_rs_vand"]


@pytest.mark.parametrize("ec_type", TYPES)
@pytest.mark.parametrize("k,m", [(4, 2), (3, 1), (6, 3)])
def test_data_fragments_join_to_what_pyeclib_decodes(ec_type, k, m):
    scheme = ECScheme(k, m, ec_type, segment_size=1 << 16)
    rng = random.Random(k * 10 + m)
    for length in (1, 2, k - 1, k, k + 1, 1000, 4097, 1 << 16):
        segment = rng.randbytes(length)
        fragments = scheme.encode_segment(segment)
        frag_len = scheme.fragment_size(length)
        for i, f in enumerate(fragments):
            assert frag_header.fragment_ok(scheme, memoryview(f), i, length, frag_len)
        assert frag_header.join_data(scheme, length, fragments[:k]) == segment
        assert scheme.driver.decode(fragments[:k]) == segment
        # decode_checked: views of data fragments joined, parity ones through pyeclib
        views = [memoryview(f) for f in fragments]
        assert decode_checked(scheme, length, views[:k]) == segment
        assert decode_checked(scheme, length, views[m:]) == segment
        assert frag_header.join_data(scheme, length, fragments[1:k + 1]) is None


@pytest.mark.parametrize("ec_type", TYPES)
def test_any_flipped_byte_fails_the_python_check_as_pyeclibs(ec_type):
    scheme = ECScheme(4, 2, ec_type, segment_size=4096)
    segment = random.Random(3).randbytes(3001)
    fragments = scheme.encode_segment(segment)
    frag_len = scheme.fragment_size(len(segment))
    for i, f in enumerate(fragments):
        for pos in list(range(frag_header.HEADER.size)) + [80, 81, 500, len(f) - 1]:
            bad = bytearray(f)
            bad[pos] ^= 0x20
            if pos >= frag_header.HEADER.size + frag_header.struct.unpack_from("<I", f, 4)[0]:
                continue  # alignment padding past the payload: no checksum covers it
            if 63 <= pos < 67 or 71 <= pos < 80:
                continue  # liberasurecode's version and padding: no check covers them
            assert not frag_header.fragment_ok(scheme, bytes(bad), i, len(segment),
                                               frag_len), (i, pos)
            assert fragment_problem(scheme, bytes(bad), i, len(segment), frag_len), (i, pos)
        # right fragment, wrong place
        assert not frag_header.fragment_ok(scheme, f, (i + 1) % 6, len(segment), frag_len)
        assert not frag_header.fragment_ok(scheme, f, i, len(segment) - 1, frag_len)
        assert not frag_header.fragment_ok(scheme, f[:-1], i, len(segment), frag_len)
        assert fragment_problem(scheme, memoryview(f), i, len(segment), frag_len) is None


def test_a_scheme_whose_fragments_do_not_read_as_expected_takes_pyeclibs_path(monkeypatch):
    scheme = ECScheme(4, 2, segment_size=4096)
    segment = random.Random(4).randbytes(2000)
    fragments = scheme.encode_segment(segment)
    monkeypatch.setattr(frag_header, "_probe", lambda *a: None)
    assert not frag_header.fragment_ok(scheme, fragments[0], 0, len(segment),
                                       len(fragments[0]))
    assert frag_header.join_data(scheme, len(segment), fragments[:4]) is None
    assert fragment_problem(scheme, fragments[0], 0, len(segment), len(fragments[0])) is None
    assert decode_checked(scheme, len(segment), fragments[:4]) == segment


def test_stream_reads_fragments_as_views_across_any_chunking():
    from swiftlite.proxy.ec_get import _Stream

    data = random.Random(5).randbytes(50_000)

    class Resp:
        def __init__(self, sizes):
            self.sizes = sizes

        async def iter_chunks(self, _n):
            at = 0
            for size in itertools.cycle(self.sizes):
                if at >= len(data):
                    return
                yield data[at:at + size]
                at += size

        def release(self):
            pass

    class Info:
        frag_index = 0

    class Arch:
        info = Info()

    async def run(sizes, n):
        s = _Stream(Arch(), Resp(sizes))
        out = []
        for _ in range(len(data) // n):
            out.append(bytes(await s.read_exact(n)))
        with pytest.raises(EOFError):
            await s.read_exact(len(data))
        return b"".join(out)

    for sizes, n in [([1000], 1000), ([4096], 1000), ([999, 3], 250), ([7], 5000),
                     ([50_000], 2500), ([1, 20_000], 3333)]:
        got = asyncio.run(run(sizes, n))
        assert got == data[:len(got)] and len(got) == len(data) // n * n, (sizes, n)


def test_update_senders_as_swift():
    assert update_senders(3, 6, 5) == 3  # 4+2, all stored: one per container replica
    assert update_senders(3, 5, 5) == 3
    assert update_senders(3, 14, 11) == 5  # 10+4: 3 commits may fail, 2 updates remain
    assert update_senders(0, 6, 5) == 0
    assert update_senders(1, 6, 5) == 2
    assert update_senders(5, 3, 3) == 3  # never more than the commits sent


@pytest.mark.parametrize("replicas,n,need", [(3, 6, 5), (3, 14, 11), (1, 6, 5),
                                             (5, 9, 7), (3, 3, 2)])
def test_a_quorum_of_updates_survives_any_failed_commits(replicas, n, need):
    """Whatever `stored - need` commits fail (the PUT still answers 201), at least a
    container quorum of the update-carrying ones succeeded; and each container replica is
    named by some commit."""
    for stored in range(need, n + 1):
        senders = update_senders(replicas, stored, need)
        assert {j % replicas for j in range(senders)} == set(range(min(replicas, stored)))
        for failed in itertools.combinations(range(stored), stored - need):
            left = [j for j in range(senders) if j not in failed]
            assert len(left) >= min(quorum_size(replicas), senders)
