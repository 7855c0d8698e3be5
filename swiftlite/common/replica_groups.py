"""Grouped replica writes: one request for the replicas the ring put on one object server.

When several primaries of a partition are devices of the same object server (any cluster
with fewer nodes than replicas, like `swiftlite up` on one machine), the proxy sends the
body once with the other devices in ``X-Backend-Also-Devices``; the server reads and hashes
it once and writes it to every device concurrently. The response's status is the first
device's; ``X-Backend-Also-Statuses`` gives the others' in the order they were named. A
server that does not know the header answers without the statuses header, and the proxy
then writes those replicas one by one as before.

Each named device carries the container replica its write must update, as the first device
does with X-Container-Host/Device/Partition: ``device;host:port;cdevice;cpartition``.

The same holds one step further: those container replicas usually share a container server
too, so the object server's batched updates to one container server go as one MERGE whose
body lists ``[device, partition, rows]`` sections (marked by ``X-Backend-Sections``), each
answered in ``X-Backend-Section-Statuses``.
"""

from __future__ import annotations

from typing import Any

ALSO_DEVICES = "X-Backend-Also-Devices"
# Container updates for several DBs of one container server in one MERGE (container_updates)
SECTIONS = "X-Backend-Sections"
SECTION_STATUSES = "X-Backend-Section-Statuses"
ALSO_STATUSES = "X-Backend-Also-Statuses"
MAX_ALSO = 8
MAX_BODY = 8 * 1024 * 1024  # grouped bodies are held in memory whole


def format_also(members: list[tuple[str, dict[str, str]]]) -> str:
    """members: (device, that replica's backend headers) -> header value."""
    out = []
    for device, h in members:
        host, cdev, cpart = (h.get("X-Container-Host", ""), h.get("X-Container-Device", ""),
                             h.get("X-Container-Partition", ""))
        out.append(f"{device};{host};{cdev};{cpart}" if host else device)
    return ",".join(out)


def parse_also(value: str) -> list[tuple[str, dict[str, str]]]:
    """Header value -> (device, container-update headers); ValueError when malformed."""
    members: list[tuple[str, dict[str, Any]]] = []
    for entry in value.split(","):
        fields = [f.strip() for f in entry.split(";")]
        if not fields[0] or "/" in fields[0]:
            raise ValueError(f"bad device in {ALSO_DEVICES}")
        if len(fields) == 1:
            members.append((fields[0], {}))
        elif len(fields) == 4:
            members.append((fields[0], {"X-Container-Host": fields[1],
                                        "X-Container-Device": fields[2],
                                        "X-Container-Partition": fields[3]}))
        else:
            raise ValueError(f"bad entry in {ALSO_DEVICES}")
    if len(members) > MAX_ALSO:
        raise ValueError(f"too many devices in {ALSO_DEVICES}")
    return members


def parse_statuses(value: str | None, n: int) -> list[int] | None:
    """The also-devices' statuses, or None when absent or not one per device."""
    if value is None:
        return None
    try:
        out = [int(v) for v in value.split(",")]
    except ValueError:
        return None
    return out if len(out) == n else None
