"""Range parsing and conditional request rules."""

from __future__ import annotations

import pytest

from swiftlite.common import ranges


@pytest.mark.parametrize("header,expected", [
    (None, None),
    ("bytes=0-4", [(0, 5)]),
    ("bytes=5-", [(5, 10)]),
    ("bytes=-3", [(7, 10)]),
    ("bytes=-30", [(0, 10)]),
    ("bytes=8-100", [(8, 10)]),
    ("bytes=0-0,2-3", [(0, 1), (2, 4)]),
    ("bytes=20-30", []),
    ("bytes=-0", []),
    ("bytes=20-30,1-2", [(1, 3)]),
    ("bytes=5-4", None),
    ("bytes=a-b", None),
    ("bytes=-", None),
    ("items=0-1", None),
    ("bytes 0-1", None),
    ("bytes=" + ",".join(["0-1"] * 51), None),
])
def test_parse_range(header, expected):
    assert ranges.parse_range(header, 10) == expected


LM = 1_700_000_000  # last modified, seconds


@pytest.mark.parametrize("headers,status", [
    ({}, None),
    ({"If-Match": '"abc"'}, None),
    ({"If-Match": "*"}, None),
    ({"If-Match": '"zzz", "yyy"'}, 412),
    ({"If-None-Match": '"abc"'}, 304),
    ({"If-None-Match": "*"}, 304),
    ({"If-None-Match": '"zzz"'}, None),
    ({"If-Modified-Since": "Tue, 14 Nov 2023 22:13:20 GMT"}, 304),
    ({"If-Modified-Since": "Tue, 14 Nov 2023 22:13:19 GMT"}, None),
    ({"If-Modified-Since": "garbage"}, None),
    ({"If-Unmodified-Since": "Tue, 14 Nov 2023 22:13:19 GMT"}, 412),
    ({"If-Unmodified-Since": "Tue, 14 Nov 2023 22:13:20 GMT"}, None),
    ({"If-None-Match": '"zzz"', "If-Modified-Since": "Tue, 14 Nov 2023 22:13:20 GMT"}, None),
])
def test_conditions(headers, status):
    assert ranges.check_conditions(headers, "abc", LM) == status


def test_multipart_length_matches_body():
    heads, tail, total = ranges.multipart_parts([(0, 2), (5, 9)], 10, "text/plain", "B")
    body = heads[0] + b"xx\r\n" + heads[1] + b"yyyy\r\n" + tail
    assert len(body) == total
    assert b"Content-Range: bytes 5-8/10" in heads[1]
