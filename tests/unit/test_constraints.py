"""Metadata limits: per request (check_metadata) and over what a DB stores after a change."""

from __future__ import annotations

from swiftlite.common.constraints import (
    MAX_META_COUNT,
    MAX_META_OVERALL_SIZE,
    MAX_META_VALUE_LENGTH,
    check_metadata,
    check_stored_metadata,
)


def surrogated(raw: bytes) -> str:
    """A header value as aiohttp's parser hands it over."""
    return raw.decode("utf-8", "surrogateescape")


def test_utf8_values_count_in_bytes_and_pass():
    emoji = "😀" * (MAX_META_VALUE_LENGTH // 4)  # exactly the limit in UTF-8 bytes
    assert check_metadata({"X-Object-Meta-E": emoji, "X-Object-Meta-J": "日本語"}, "object") \
        is None
    assert check_metadata({"X-Object-Meta-E": emoji + "a"}, "object") == \
        f"Metadata value longer than {MAX_META_VALUE_LENGTH}: x-object-meta-E"


def test_invalid_utf8_name_or_value_is_refused():
    for raw in (b"a\xffb", "日本".encode()[:4]):
        assert check_metadata({"X-Container-Meta-K": surrogated(raw)}, "container") == \
            "Metadata value must be valid UTF-8"
        assert check_metadata({"X-Account-Meta-" + surrogated(raw): "v"}, "account") == \
            "Metadata name must be valid UTF-8"
    # Other kinds' headers are not this check's business.
    assert check_metadata({"X-Object-Meta-K": surrogated(b"\xff")}, "container") is None


def test_empty_name_count_and_total():
    assert check_metadata({"X-Object-Meta-": "v"}, "object") == \
        "Metadata name cannot be empty"
    many = {f"X-Object-Meta-{i}": "v" for i in range(MAX_META_COUNT + 1)}
    assert check_metadata(many, "object") == f"Too many metadata items; max {MAX_META_COUNT}"
    big = {f"X-Object-Meta-{i:03d}": "v" * 200 for i in range(21)}
    assert check_metadata(big, "object") == \
        f"Total metadata too large; max {MAX_META_OVERALL_SIZE}"


def test_stored_total_counts_live_user_metadata_only():
    ts = "1700000000.00000"
    meta = {f"x-container-meta-{i:04d}": ["k" * 256, ts] for i in range(15)}  # 15 * 260
    room = MAX_META_OVERALL_SIZE - 15 * 260 - 1  # name "k" is one byte
    meta["x-container-meta-k"] = ["y" * room, ts]
    assert check_stored_metadata(meta, "container") is None
    meta["x-container-meta-k"] = ["z" * (room + 1), ts]
    assert check_stored_metadata(meta, "container") == \
        f"Total metadata too large; max {MAX_META_OVERALL_SIZE}"
    # Deleted keys ("") and sysmeta do not count.
    meta["x-container-meta-k"] = ["", ts]
    meta["x-container-sysmeta-big"] = ["s" * 5000, ts]
    assert check_stored_metadata(meta, "container") is None
    many = {f"x-account-meta-{i}": ["v", ts] for i in range(MAX_META_COUNT + 1)}
    assert check_stored_metadata(many, "account") == \
        f"Too many metadata items; max {MAX_META_COUNT}"
