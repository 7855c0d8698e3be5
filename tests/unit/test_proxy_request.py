"""api_path: parses kept across requests never change a verdict."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import make_mocked_request

from swiftlite.common.http import HTTPError
from swiftlite.proxy import request as req
from swiftlite.proxy.request import ALLOW_RESERVED, ApiPath, api_path


def _parse(path: str, reserved: bool = False) -> ApiPath | None:
    r = make_mocked_request("GET", path)
    if reserved:
        r[ALLOW_RESERVED] = True
    return api_path(r)


def test_a_kept_parse_is_the_same_answer():
    first = _parse("/v1/AUTH_a/c/o%20x")
    assert first == ApiPath("v1", "AUTH_a", "c", "o x")
    assert _parse("/v1/AUTH_a/c/o%20x") == first
    assert _parse("/info") is None and _parse("/info") is None


def test_a_bad_path_is_refused_every_time():
    for _ in range(2):
        with pytest.raises(HTTPError) as exc:
            _parse("/v1/AUTH_a/c/%FF")
        assert exc.value.status == 412


def test_a_reserved_parse_is_never_a_clients():
    path = "/v1/AUTH_a/%00versions/o"
    assert _parse(path, reserved=True) == ApiPath("v1", "AUTH_a", "\x00versions", "o")
    with pytest.raises(HTTPError) as exc:  # a client may not name the reserved namespace
        _parse(path)
    assert exc.value.status == 412
    with pytest.raises(HTTPError):  # nor after a client's refusal was seen first
        _parse("/v1/AUTH_a/%00other/o")
    assert _parse("/v1/AUTH_a/%00other/o", reserved=True).container == "\x00other"


def test_what_is_kept_is_bounded(monkeypatch):
    monkeypatch.setattr(req, "MAX_PARSED", 50)
    req._parsed.clear()
    for i in range(req.MAX_PARSED + 10):
        _parse(f"/v1/AUTH_a/c/o{i}")
    assert len(req._parsed) <= req.MAX_PARSED
    _parse("/v1/AUTH_a/c/" + "x" * req.MAX_KEPT_PATH)  # too long to keep
    _parse("/v1/AUTH_a/c/o?multipart-manifest=get")  # a query: not kept
    assert not any(len(p) > req.MAX_KEPT_PATH or "?" in p for p in req._parsed)


def _verdict(parse, path: str):
    try:
        return parse(path, False)
    except HTTPError as exc:
        return exc.status


@pytest.mark.parametrize("path", [
    "/v1/a", "/v1/a/", "/v1.0/a/c", "/v1/a/c/", "/v1/a/c/o", "/v1/a/c/o/", "/v1/a/c/o/p/q",
    "/v1/a//", "/v1/a//o", "/v1//c/o", "/v1/", "/v1", "/V1/a", "/v2/a", "/v1/a/./o",
    "/v1/a/../o", "/v1/a/c/.", "/v1/a/c/..", "/v1/a/c/x/./y", "/v1/a/c/x/../y", "/v1/a/c/.x/..y",
    "/v1/a/c/o%20x", "/v1/a/c/o\x01", "/v1/a/c/o\x00", "/v1/a/c/\udcff", "/v1/a/c/o?x=1",
    "/v1/" + "a" * 256, "/v1/" + "a" * 257, "/v1/a/" + "c" * 256, "/v1/a/" + "c" * 257,
    "/v1/a/c/" + "o" * 1024, "/v1/a/c/" + "o" * 1025, "/v1/a/c/" + "o/" * 512,
    "//v1/a", "/info", "/v1/.a/c/o", "/v1/a/c//o",
])
def test_the_one_match_reading_of_plain_paths_is_the_name_checks_verdict(path):
    # _parse reads most paths in one regex match; _parse_names decodes and checks each name.
    # Both must say the same of every path, refusals included.
    assert _verdict(req._parse, path) == _verdict(req._parse_names, path)
