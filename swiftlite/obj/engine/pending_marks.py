"""Marks of pending fragment archives, so that abandoned ones are found without a listing.

An EC PUT's first phase leaves ``<ts>.pend`` in the object's hash dir (obj/engine/ec_archive.py);
the proxy's commit renames it to ``<ts>.data``. When the commit never comes (the proxy died
between the phases, or fewer than a quorum of archives were stored), the .pend stays: never
read, never counted by the suffix digests, so no pass ever lists its directory, and without
more its disk space would be lost for good.

So each .pend is marked: an empty file ``<device>/ec-pending/<policy>.<part>.<hash>.<ts>``,
made just before the .pend is renamed into place, inside the same group flush (syncfs), so a
durable .pend always has a durable mark (with `sync_mode = file` the mark is not fsynced: a
power loss may forget one, and that .pend is then left behind as before). The commit removes
the mark (unflushed: a mark that comes back after a crash is only looked at once more).
The directory so holds the archives in flight, plus those abandoned within `reclaim_age`.

`sweep` (the reconstructor runs it every pass) looks only there: a mark older than
`reclaim_age` (seven days, as Swift keeps non-durable fragments) has its .pend removed, if it
is still there, under the hash dir's lock (a commit of the same archive takes it too), and
then the mark. By then the reconstructor has had a week of passes to make the archive durable
if its version is durable on other primaries (it does that when it syncs the partition).
"""

from __future__ import annotations

import contextlib
import os

from swiftlite.obj.engine.fileformat import hash_dir, policy_of, policy_part
from swiftlite.obj.engine.hashdir import locked_hash_dir

DIR = "ec-pending"
PENDING = "pend"  # the extension of a pending archive (ec_archive.PENDING)


def _name(part: int | str, hexhash: str, timestamp: str) -> str:
    return f"{policy_of(part)}.{int(part)}.{hexhash}.{timestamp}"


def note(device_path: str, part: int | str, hexhash: str, timestamp: str) -> None:
    """Mark the pending archive of `timestamp` (before it is renamed into its hash dir)."""
    path = os.path.join(device_path, DIR, _name(part, hexhash, timestamp))
    try:
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    os.close(fd)


def clear(device_path: str, part: int | str, hexhash: str, timestamp: str) -> None:
    """The archive of `timestamp` is durable (or lost to a newer version): no mark needed."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(device_path, DIR, _name(part, hexhash, timestamp)))


def marks(device_path: str) -> list[str]:
    try:
        return os.listdir(os.path.join(device_path, DIR))
    except FileNotFoundError:
        return []


def sweep(device_path: str, reclaim_age: float, now: float) -> tuple[int, int]:
    """Remove the pending archives marked before `now - reclaim_age` and their marks.
    Returns (archives removed, marks removed). Blocking."""
    removed = cleared = 0
    for name in marks(device_path):
        try:
            policy, part, hexhash, timestamp = name.split(".", 3)
            made = float(timestamp.partition("_")[0])
            ppart = policy_part(int(part), int(policy))
        except ValueError:
            continue  # not ours
        if made > now - reclaim_age:
            continue
        # A hash dir gone (moved, reclaimed) leaves only the mark: lock nothing into being.
        if os.path.isdir(hash_dir(device_path, ppart, hexhash)) and \
                _remove_pending(device_path, ppart, hexhash, timestamp):
            removed += 1
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(device_path, DIR, name))
            cleared += 1
    return removed, cleared


def _remove_pending(device_path: str, part: int, hexhash: str, timestamp: str) -> bool:
    with locked_hash_dir(device_path, part, hexhash) as held:
        if held is None or f"{timestamp}.{PENDING}" not in held.names:
            return False
        try:
            os.unlink(os.path.join(held.path, f"{timestamp}.{PENDING}"))
        except FileNotFoundError:
            return False
        return True
