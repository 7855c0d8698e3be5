"""Request limits (Swift's defaults) and the name checks every server applies.

Each check returns None when the value is acceptable, or a short reason for the 4xx body.
"""

from __future__ import annotations

MAX_FILE_SIZE = 5 * 1024**3 + 2  # Swift's default: 5 GiB + 2 bytes
MAX_META_NAME_LENGTH = 128
MAX_META_VALUE_LENGTH = 256
MAX_META_COUNT = 90
MAX_META_OVERALL_SIZE = 4096
MAX_HEADER_SIZE = 8192
MAX_HEADER_COUNT = 90 + 32  # metadata plus the ordinary headers a client sends
MAX_OBJECT_NAME_LENGTH = 1024
MAX_CONTAINER_NAME_LENGTH = 256
MAX_ACCOUNT_NAME_LENGTH = 256
CONTAINER_LISTING_LIMIT = 10000
ACCOUNT_LISTING_LIMIT = 10000
EXTRA_HEADER_COUNT = 0
MAX_URL_LENGTH = 8192

META_PREFIXES = {
    "object": "x-object-meta-",
    "container": "x-container-meta-",
    "account": "x-account-meta-",
}


def check_utf8(name: str, reserved: bool = False) -> str | None:
    """Names arrive decoded with surrogateescape; a lone surrogate means bad UTF-8.

    `reserved`: a name of the reserved namespace (see common/reserved.py: it starts with
    NUL) is fine; only the cluster's own requests ever ask for that."""
    if not name.isascii():  # (an ASCII name always encodes: most names, no encode)
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            return "invalid UTF-8"
    if "\x00" in name and not (reserved and name[0] == "\x00"):
        return "NUL byte in name"
    return None


def check_name(kind: str, name: str, max_len: int, reserved: bool = False) -> str | None:
    if not name:
        return f"empty {kind} name"
    bad = check_utf8(name, reserved)
    if bad:
        return f"{kind} name: {bad}"
    if (len(name) if name.isascii() else len(name.encode("utf-8"))) > max_len:
        return f"{kind} name longer than {max_len} bytes"
    if kind != "object" and "/" in name:
        return f"{kind} name contains '/'"
    return None


def check_account(name: str, reserved: bool = False) -> str | None:
    return check_name("account", name, MAX_ACCOUNT_NAME_LENGTH, reserved)


def check_container(name: str, reserved: bool = False) -> str | None:
    # Swift takes "." and ".." (201); like the object segments below we refuse them: URL
    # normalisation in clients and caches turns /v1/a/../o into another account's path,
    # and `swift download` of such a container writes outside its directory.
    if name in (".", ".."):
        return "container name cannot be '.' or '..'"
    return check_name("container", name, MAX_CONTAINER_NAME_LENGTH, reserved)


def check_object(name: str, reserved: bool = False) -> str | None:
    bad = check_name("object", name, MAX_OBJECT_NAME_LENGTH, reserved)
    if bad:
        return bad
    # Path tricks: a "." or ".." segment would be normalised away by some clients and proxies.
    for seg in name.split("/"):
        if seg in (".", ".."):
            return "object name contains a '.' or '..' path segment"
    return None


def _utf8_len(text: str) -> int | None:
    """Length in UTF-8 bytes; None when the text holds bytes that were not UTF-8 (aiohttp
    decodes headers with surrogateescape, so such bytes arrive as lone surrogates)."""
    if text.isascii():
        return len(text)
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return None


def check_metadata(headers, kind: str) -> str | None:
    """Swift's metadata limits, applied to the X-<kind>-Meta-* headers of a request; names
    and values must also be valid UTF-8 (they are stored and sent back as UTF-8)."""
    prefix = META_PREFIXES[kind]
    count = 0
    size = 0
    for key, value in headers.items():
        lk = key.lower()
        if not lk.startswith(prefix):
            continue
        name = key[len(prefix):]
        if not name:
            return "Metadata name cannot be empty"
        nlen = _utf8_len(name)
        if nlen is None:
            return "Metadata name must be valid UTF-8"
        vlen = _utf8_len(value)
        if vlen is None:
            return "Metadata value must be valid UTF-8"
        count += 1
        size += nlen + vlen
        if nlen > MAX_META_NAME_LENGTH:
            return f"Metadata name too long: {prefix}{name.title()}"
        if vlen > MAX_META_VALUE_LENGTH:
            return f"Metadata value longer than {MAX_META_VALUE_LENGTH}: {prefix}{name.title()}"
        if count > MAX_META_COUNT:
            return f"Too many metadata items; max {MAX_META_COUNT}"
        if size > MAX_META_OVERALL_SIZE:
            return f"Total metadata too large; max {MAX_META_OVERALL_SIZE}"
    return None


def check_content_type(value: str) -> str | None:
    """A client's Content-Type may not carry a `swift_bytes` parameter: it is the size a
    container listing shows and quotas count, set only by the proxy's own features (through
    sysmeta), so a client could otherwise misstate its usage."""
    for param in value.split(";")[1:]:
        if param.partition("=")[0].strip().lower() == "swift_bytes":
            return "Invalid Content-Type: the swift_bytes parameter is reserved"
    return None


def check_stored_metadata(metadata, kind: str) -> str | None:
    """The count and overall-size limits over a DB's whole metadata after a change
    ({lower-case key: [value, timestamp]}; "" is a deleted key), as Swift's DB servers check
    on PUT/POST: a POST fine by itself may not take the stored total over the limit."""
    prefix = META_PREFIXES[kind]
    count = 0
    size = 0
    for key, pair in metadata.items():
        value = pair[0]
        if value == "" or not key.startswith(prefix):
            continue
        count += 1
        size += len(key[len(prefix):].encode("utf-8", "surrogateescape")) + \
            len(value.encode("utf-8", "surrogateescape"))
    if count > MAX_META_COUNT:
        return f"Too many metadata items; max {MAX_META_COUNT}"
    if size > MAX_META_OVERALL_SIZE:
        return f"Total metadata too large; max {MAX_META_OVERALL_SIZE}"
    return None
