"""What the object reconstructor does for one partition, decided from digests and states.

Digests (``digests``) count only an object's current files: its newest durable archive
(``<ts>.data``; a ``.pend`` is never current), tombstone or ``.meta``; an archive's fragment
index is in its metadata, not its name. So the digest of a suffix is the same on every
primary that holds the same durable versions, whichever fragment index each holds: primary i
compares its digests with the other primaries' as they are, and an in-sync partition costs one
digest request per peer and no listing. Which fragment index a device's archives must have
is the ring's: its position among the partition's primaries.

Pure functions of digests and states (``{suffix: {hash: state}}``, ``sync``'s states).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from swiftlite.obj.sync import file_stem, main_key, split_state

States = Mapping[str, Mapping[str, str]]  # suffix -> hash -> state


def differing(local: Mapping[str, bytes], remote: Mapping[str, bytes]) -> list[str]:
    """Suffixes whose digests differ (either side may lack one)."""
    return sorted(s for s in set(local) | set(remote) if local.get(s) != remote.get(s))


@dataclass
class PrimaryPlan:
    # (hash, "<ts>.data", peers holding it durable): our archive of that version to rebuild
    rebuild: list[tuple[str, str, list[int]]] = field(default_factory=list)
    # peer -> [(hash, file)]: tombstones and .meta files we hold that it lacks
    send: dict[int, list[tuple[str, str]]] = field(default_factory=dict)


def plan_primary(mine: States, theirs: Mapping[int, States]) -> PrimaryPlan:
    """Compare our states with each peer's, suffix by suffix: a peer's states count for
    the suffixes it listed (those whose digest differed from ours)."""
    plan = PrimaryPlan()
    for s in sorted(set(mine) | {s for t in theirs.values() for s in t}):
        ours_s = mine.get(s, {})
        hashes = set(ours_s) | {h for t in theirs.values() for h in t.get(s, {})}
        for h in sorted(hashes):
            ours = ours_s.get(h, "")
            our_main, our_meta = split_state(ours)
            # Only the peers that listed this suffix: one that did not holds what we hold.
            peer_mains = {j: split_state(t[s].get(h, ""))[0] for j, t in theirs.items()
                          if s in t}
            newest = max([our_main, *peer_mains.values()], key=main_key)
            if newest and newest.endswith(".data") and main_key(newest) > main_key(our_main):
                holders = [j for j, m in peer_mains.items() if m == newest]
                plan.rebuild.append((h, newest, holders))
            for j, peer_main in peer_mains.items():
                # Never a .data: our archive is another fragment index than the peer's.
                if our_main and our_main.endswith(".ts") and \
                        main_key(our_main) > main_key(peer_main):
                    plan.send.setdefault(j, []).append((h, our_main))
                elif our_meta and our_main and file_stem(peer_main) == file_stem(our_main) and \
                        file_stem(our_meta) > file_stem(split_state(
                            theirs[j][s].get(h, ""))[1]):
                    plan.send.setdefault(j, []).append((h, our_meta))
    return plan


def plan_revert(states: States, frag_index: Mapping[str, int | None],
                primaries: int) -> dict[int, list[tuple[str, str]]]:
    """A handoff's objects by the primary (its position) that must hold them: an archive
    goes to the primary of its fragment index, a tombstone or .meta to every primary. An
    archive of unknown index is left (the auditor quarantines it)."""
    out: dict[int, list[tuple[str, str]]] = {}
    for s in sorted(states):
        for h, state in sorted(states[s].items()):
            main, meta = split_state(state)
            files = [f for f in (main, meta) if f]
            if main and main.endswith(".data"):
                index = frag_index.get(h)
                if index is None or not 0 <= index < primaries:
                    continue
                out.setdefault(index, []).extend((h, f) for f in files)
            else:
                for j in range(primaries):
                    out.setdefault(j, []).extend((h, f) for f in files)
    return out
