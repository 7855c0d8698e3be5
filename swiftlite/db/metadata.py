"""DB metadata, {key: [value, timestamp]}, and how two replicas' metadata merge."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Metadata = dict[str, list[str]]  # key -> [value, timestamp]


def merge_metadata(current: Metadata, incoming: Mapping[str, Any],
                   first_wins: tuple[str, ...] = (), dead_before: str = "") -> bool:
    """Newest timestamp wins per key; returns whether anything changed.

    A key of `first_wins` (a container's storage policy) keeps the OLDEST of two values
    set after `dead_before` (the DB's delete timestamp: values set before it belong to a
    deleted incarnation), lower value first at the same time; anything else about it (a
    value against a clear, or a dead one) is newest-wins. So replicas created at once with
    different values all settle on the first one set, whatever order they merge in, and a
    container deleted and created again takes its new value (newer than the delete)."""
    changed = False
    for key, pair in incoming.items():
        value, ts = pair[0], pair[1]
        old = current.get(key)
        if old is None:
            wins = True
        elif (key in first_wins and value != "" and old[0] != ""
              and ts > dead_before and old[1] > dead_before):
            wins = (ts, value) < (old[1], old[0])
        else:
            wins = ts > old[1]
        if wins and [value, ts] != old:
            current[key] = [value, ts]
            changed = True
    return changed
