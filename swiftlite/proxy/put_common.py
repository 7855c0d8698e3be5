"""What a replicated PUT and an erasure-coded one share beyond the fan-out engine
(`Backend.fan_out`, `Backend.stream_out`): which container replica each object server tells
about the write."""

from __future__ import annotations


def container_headers(base: dict[str, str], cpart: int, cnodes: list[dict]):
    """Each object replica tells a different container replica about the write."""
    def headers_for(index: int, node: dict) -> dict[str, str]:
        h = dict(base)
        if cnodes:
            cn = cnodes[index % len(cnodes)]
            h["X-Container-Host"] = f"{cn['ip']}:{cn['port']}"
            h["X-Container-Device"] = cn["device"]
            h["X-Container-Partition"] = str(cpart)
        return h
    return headers_for
