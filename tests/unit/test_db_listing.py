"""The listing walk (prefix, delimiter, markers, reverse, limit) against a plain model."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from swiftlite.db.listing import (
    Bounds,
    ListingParams,
    _accept_format,
    next_after,
    render_body,
    walk,
)


def make_fetch(names: list[str]):
    ordered = sorted(set(names), key=lambda n: n.encode())
    calls = []

    def fetch(b: Bounds, prefix: str | None, limit: int, reverse: bool) -> list[tuple]:
        calls.append(limit)
        out = []
        seq = reversed(ordered) if reverse else ordered
        for n in seq:
            if b.lo is not None and (n < b.lo or (n == b.lo and not b.lo_incl)):
                continue
            if b.hi is not None and n >= b.hi:
                continue
            if prefix and not n.startswith(prefix):
                continue
            out.append((n, "row"))
            if len(out) >= limit:
                break
        return out

    return fetch, calls


def model(names: list[str], p: ListingParams) -> list[tuple]:
    """Swift's documented semantics, written the obvious (slow) way."""
    ordered = sorted(set(names), key=lambda n: n.encode())
    lo, hi = (p.end_marker, p.marker) if p.reverse else (p.marker, p.end_marker)
    prefix = p.prefix or ""
    sel = [n for n in ordered if (lo is None or n > lo) and (hi is None or n < hi)
           and n.startswith(prefix)]
    if p.reverse:
        sel.reverse()
    out: list[tuple] = []
    for n in sel:
        if p.delimiter:
            i = n.find(p.delimiter, len(prefix))
            if i >= 0:
                d = n[: i + len(p.delimiter)]
                if d != p.marker and (not out or out[-1] != (d,)):
                    out.append((d,))
                continue
        out.append((n, "row"))
    return out[: p.limit]


def params(**kw) -> ListingParams:
    base = dict(limit=10000, marker=None, end_marker=None, prefix=None, delimiter=None,
                reverse=False, out_format="json")
    base.update(kw)
    return ListingParams(**base)


NAMES = ["a", "a/b", "a/c/d", "a/c/e", "b", "b/x", "c", "é", "é/1", "z/", "\U0001F600", "aa"]


def names_of(rows):
    return [r[0] for r in rows]


def test_plain_order_is_utf8_bytes():
    fetch, _ = make_fetch(NAMES)
    got = names_of(walk(fetch, params()))
    assert got == sorted(NAMES, key=lambda n: n.encode())
    assert got[-3:] == ["é", "é/1", "\U0001F600"]


def test_delimiter_rolls_up_subdirs():
    fetch, _ = make_fetch(NAMES)
    rows = walk(fetch, params(delimiter="/"))
    assert names_of(rows) == ["a", "a/", "aa", "b", "b/", "c", "z/", "é", "é/", "\U0001F600"]
    assert [len(r) for r in rows][:2] == [2, 1]  # subdir entries carry only the name


def test_prefix_and_delimiter():
    fetch, _ = make_fetch(NAMES)
    assert names_of(walk(fetch, params(prefix="a/", delimiter="/"))) == ["a/b", "a/c/"]


def test_markers_and_reverse():
    fetch, _ = make_fetch(NAMES)
    assert names_of(walk(fetch, params(marker="b", end_marker="é"))) == ["b/x", "c", "z/"]
    assert names_of(walk(fetch, params(reverse=True, marker="b", limit=3))) == [
        "aa", "a/c/e", "a/c/d"]
    assert names_of(walk(fetch, params(reverse=True, marker="c", end_marker="a/c/e"))) == [
        "b/x", "b", "aa"]
    # A marker equal to a subdir skips that subdir, as Swift does.
    assert names_of(walk(fetch, params(marker="a/", delimiter="/"))) == [
        "aa", "b", "b/", "c", "z/", "é", "é/", "\U0001F600"]


def test_limit_counts_subdirs():
    fetch, _ = make_fetch(NAMES)
    assert names_of(walk(fetch, params(delimiter="/", limit=2))) == ["a", "a/"]
    assert walk(fetch, params(limit=0)) == []


def test_next_after():
    assert next_after("a/") == "a0"
    assert next_after("a\U0010FFFF") == "b"
    assert next_after("\ud7ff") == "\ue000"
    assert next_after("\U0010FFFF") is None


def test_accept_negotiation():
    assert _accept_format(None) == "plain"
    assert _accept_format("application/json") == "json"
    assert _accept_format("text/xml") == "xml"
    assert _accept_format("application/xml;q=0.5, application/json;q=0.9") == "json"
    assert _accept_format("*/*") == "plain"
    assert _accept_format("application/*") == "json"


alphabet = st.sampled_from(["a", "b", "/", "-", "é", "\U0001F600"])
name_st = st.text(alphabet, min_size=1, max_size=5)
opt = st.one_of(st.none(), name_st)


@settings(max_examples=300, deadline=None)
@given(names=st.lists(name_st, max_size=25), marker=opt, end_marker=opt,
       prefix=st.one_of(st.none(), st.text(alphabet, min_size=1, max_size=2)),
       delimiter=st.sampled_from([None, "/", "-", "a/"]), reverse=st.booleans(),
       limit=st.integers(0, 8))
def test_walk_matches_model(names, marker, end_marker, prefix, delimiter, reverse, limit):
    p = params(marker=marker, end_marker=end_marker, prefix=prefix, delimiter=delimiter,
               reverse=reverse, limit=limit)
    fetch, _ = make_fetch(names)
    assert walk(fetch, p) == model(names, p)


def test_iso_matches_timestamp():
    from swiftlite.common.timestamp import Timestamp
    from swiftlite.db.listing import _iso

    for raw in ("1700000000.12345", "0000000001.00000", "1700000000.00001_000000000000000a"):
        assert _iso(raw) == Timestamp.parse(raw).iso()


def path_model(names: list[str], path: str, p: ListingParams) -> list[str]:
    """Swift's `path`: names directly under path/ (a "sub/" object included), path/ itself
    and deeper names left out."""
    base = path.rstrip("/") + "/" if path else ""
    ordered = sorted(set(names), key=lambda n: n.encode())
    lo, hi = (p.end_marker, p.marker) if p.reverse else (p.marker, p.end_marker)
    sel = [n for n in ordered if (lo is None or n > lo) and (hi is None or n < hi)
           and n.startswith(base) and n != base
           and n.find("/", len(base)) in (-1, len(n) - 1)]
    if p.reverse:
        sel.reverse()
    return sel[: p.limit]


def path_params(path: str, **kw) -> ListingParams:
    base = path.rstrip("/") + "/" if path else ""
    return params(path=base, prefix=base or None, delimiter="/", **kw)


def test_path_lists_one_level_only():
    tree = ["/file1", "/dir1/", "/dir1/x", "dir1/", "dir1/file2", "dir1/sub/", "dir1/sub/f",
            "dir1/sub2/g", "dir2/", "file1"]
    fetch, _ = make_fetch(tree)
    assert names_of(walk(fetch, path_params(""))) == ["dir1/", "dir2/", "file1"]
    assert names_of(walk(fetch, path_params("/"))) == ["/dir1/", "/file1"]
    assert names_of(walk(fetch, path_params("dir1"))) == ["dir1/file2", "dir1/sub/"]
    assert names_of(walk(fetch, path_params("dir1/", reverse=True))) == [
        "dir1/sub/", "dir1/file2"]


@settings(max_examples=300, deadline=None)
@given(names=st.lists(name_st, max_size=25), path=st.text(alphabet, max_size=3),
       marker=opt, end_marker=opt, reverse=st.booleans(), limit=st.integers(0, 8))
def test_path_walk_matches_model(names, path, marker, end_marker, reverse, limit):
    p = path_params(path, marker=marker, end_marker=end_marker, reverse=reverse, limit=limit)
    fetch, _ = make_fetch(names)
    assert names_of(walk(fetch, p)) == path_model(names, path, p)


def test_xml_is_swifts():
    decl = '<?xml version="1.0" encoding="UTF-8"?>\n'
    body, ctype = render_body([], "xml", "container", "c")
    assert (body.decode(), ctype) == (decl + '<container name="c" />', "application/xml")
    body, _ = render_body([("a&b", "1700000000.50000", 3, "image/png", "e"), ("d/",)], "xml",
                          "container", "c")
    assert body.decode() == (
        decl + '<container name="c"><object><name>a&amp;b</name><hash>e</hash>'
        "<bytes>3</bytes><content_type>image/png</content_type>"
        "<last_modified>2023-11-14T22:13:20.500000</last_modified></object>"
        '<subdir name="d/"><name>d/</name></subdir></container>')
    body, _ = render_body([("日本", 2, 9, "1700000000.00000", 0), ("x-",)], "xml", "account",
                          "AUTH_t")
    assert body.decode() == (
        decl + '<account name="AUTH_t">\n<container><name>日本</name><count>2</count>'
        "<bytes>9</bytes><last_modified>2023-11-14T22:13:20.000000</last_modified>"
        "<storage_policy>Policy-0</storage_policy></container>\n"
        '<subdir name="x-" />\n</account>')
    body, _ = render_body([("日本", 2, 9, "1700000000.00000", 0)], "json", "account", "AUTH_t")
    assert body == (b'[{"name": "\\u65e5\\u672c", "count": 2, "bytes": 9, '
                    b'"last_modified": "2023-11-14T22:13:20.000000", '
                    b'"storage_policy": "Policy-0"}]')
