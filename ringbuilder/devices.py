"""Device strings and search values, in swift-ring-builder's notation.

A device string:  r<region>z<zone>-<ip>:<port>/<device>[_<meta>]   (ip may be [v6])
A search value:   any left-to-right subset of  d<id> r<region> z<zone> -<ip> :<port> /<device>
                  _<meta>, e.g. "d3", "z1", "127.0.0.1", "/d1", "r1z1-127.0.0.1:6200/d1".
"""

from __future__ import annotations

import math
import re
from typing import Any


class RingBuilderError(Exception):
    """A problem with the builder's input or state; the message is one line for the operator."""


_DEV_RE = re.compile(
    r"^(?:r(?P<region>\d+))?z(?P<zone>\d+)-(?P<ip>\[[0-9A-Fa-f:.]+\]|[^:/\s\[\]]+)"
    r":(?P<port>\d+)/(?P<device>[^_/\s]+)(?:_(?P<meta>.*))?$")

# One field each; tried in this order, each may appear at most once.
_SEARCH_FIELDS = (
    ("id", re.compile(r"d(\d+)")),
    ("region", re.compile(r"r(\d+)")),
    ("zone", re.compile(r"z(\d+)")),
    ("ip", re.compile(r"-?(\[[0-9A-Fa-f:.]+\]|\d+\.\d+\.\d+\.\d+|[A-Za-z][A-Za-z0-9.-]*)")),
    ("port", re.compile(r":(\d+)")),
    ("device", re.compile(r"/([^_/\s]+)")),
    ("meta", re.compile(r"_(.*)")),
)


def _strip_brackets(ip: str) -> str:
    return ip[1:-1] if ip.startswith("[") and ip.endswith("]") else ip


def parse_weight(value: Any) -> float:
    try:
        w = float(value)
    except (TypeError, ValueError):
        raise RingBuilderError(f"invalid weight {value!r}: not a number") from None
    if not math.isfinite(w) or w < 0:
        raise RingBuilderError(f"invalid weight {value!r}: must be a finite number >= 0")
    return w


def parse_device_string(text: str) -> dict[str, Any]:
    """'r1z2-127.0.0.1:6200/d1' -> {'region': 1, 'zone': 2, 'ip': ..., 'port': ..., ...}"""
    m = _DEV_RE.match(text.strip())
    if not m:
        raise RingBuilderError(
            f"malformed device {text!r}: expected r<region>z<zone>-<ip>:<port>/<device>")
    dev: dict[str, Any] = {
        "region": int(m["region"]) if m["region"] is not None else 1,
        "zone": int(m["zone"]),
        "ip": _strip_brackets(m["ip"]),
        "port": int(m["port"]),
        "device": m["device"],
    }
    if m["meta"]:
        dev["meta"] = m["meta"]
    return dev


def check_device(dev: dict[str, Any]) -> dict[str, Any]:
    """Validate and normalise a device dict given to add_dev; returns a clean copy."""
    out: dict[str, Any] = {}
    for key in ("region", "zone", "port"):
        value = dev.get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise RingBuilderError(f"invalid device {key} {value!r}: must be an integer")
        if value < 0 or (key == "port" and not 0 < value < 65536):
            raise RingBuilderError(f"invalid device {key} {value!r}: out of range")
        out[key] = value
    for key in ("ip", "device"):
        value = dev.get(key)
        if not isinstance(value, str) or not value or any(c.isspace() for c in value):
            raise RingBuilderError(f"invalid device {key} {value!r}: must be a non-empty word")
        out[key] = value
    if "/" in out["device"]:
        raise RingBuilderError(f"invalid device name {out['device']!r}: contains '/'")
    out["weight"] = parse_weight(dev.get("weight"))
    if dev.get("meta"):
        out["meta"] = str(dev["meta"])
    return out


def parse_search_value(text: str) -> dict[str, Any]:
    """'r1z1-127.0.0.1:6200/d1' -> {'region': 1, 'zone': 1, 'ip': ..., ...}; raises on junk."""
    rest = text.strip()
    if not rest:
        raise RingBuilderError("empty search value")
    query: dict[str, Any] = {}
    for key, rx in _SEARCH_FIELDS:
        m = rx.match(rest)
        if not m:
            continue
        value: Any = m.group(1)
        query[key] = int(value) if key in ("id", "region", "zone", "port") else value
        if key == "ip":
            query[key] = _strip_brackets(value)
        rest = rest[m.end():]
    if rest or not query:
        raise RingBuilderError(f"invalid search value {text!r}: cannot parse {rest or text!r}")
    return query


def matches(dev: dict[str, Any], query: dict[str, Any]) -> bool:
    return all(dev.get(k) == v for k, v in query.items())


def format_device(dev: dict[str, Any]) -> str:
    ip = f"[{dev['ip']}]" if ":" in dev["ip"] else dev["ip"]
    text = f"d{dev['id']}r{dev['region']}z{dev['zone']}-{ip}:{dev['port']}/{dev['device']}"
    if dev.get("meta"):
        text += f"_{dev['meta']}"
    return text
