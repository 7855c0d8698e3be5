"""The proxy's PUT answer: the replicas' own MD5s decide the ETag, and must agree."""

from __future__ import annotations

from multidict import CIMultiDict

from swiftlite.common.timestamp import Timestamp
from swiftlite.proxy.backend.replicas import BackendResponse
from swiftlite.proxy.obj import _put_answer

TS = Timestamp(1700000000_00000)
A, B = "a" * 32, "b" * 32


def stored(status: int, etag: str | None = None) -> BackendResponse:
    return BackendResponse(status, CIMultiDict({"ETag": etag} if etag else {}))


def test_quorum_agreeing_on_the_md5_answers_201_with_it():
    r = _put_answer([stored(201, A), stored(201, A), stored(503)], 3, None, TS)
    assert r.status == 201 and r.headers["ETag"] == A
    assert _put_answer([stored(201, f'"{A}"')] * 3, 3, A, TS).headers["ETag"] == A


def test_replicas_that_disagree_or_miss_the_clients_etag_are_not_a_201():
    assert _put_answer([stored(201, A), stored(201, B), stored(201, A)], 3, None,
                       TS).status == 503
    assert _put_answer([stored(201, A)] * 3, 3, B, TS).status == 503
    assert _put_answer([stored(201), stored(201), stored(201)], 3, None, TS).status == 503


def test_refusals_pass_through():
    assert _put_answer([stored(422)] * 3, 3, A, TS).status == 422
    assert _put_answer([stored(409), stored(409), stored(201, A)], 3, None, TS).status == 202
