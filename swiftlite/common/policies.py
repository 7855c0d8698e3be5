"""Storage policies: which object ring and data directory a container's objects use.

Configured in ``<swift_dir>/swiftlite.conf``, one section per policy::

    [storage-policy:0]
    name = Policy-0
    aliases = gold, standard
    default = yes
    deprecated = no
    policy_type = replication

Invariants:
- With no ``[storage-policy:N]`` section at all there is exactly one policy, index 0, named
  ``Policy-0``, default: every cluster configured before policies existed works unchanged.
- Policy 0 always exists (a container made before policies is on it); exactly one policy is
  the default (the first non-deprecated one when none says so); names and aliases are unique
  case-insensitively; the default is never deprecated.
- Policy N's objects are placed by ``object.ring.gz`` (N = 0) or ``object-N.ring.gz`` and
  live under ``<device>/objects`` (N = 0) or ``<device>/objects-N``, each with its own
  partitions, suffix digests and journals; policy 0's layout is exactly the pre-policy one.
- Only ``policy_type = replication`` is built; ``erasure_coding`` is refused at load.

Backend protocol: the proxy sends ``X-Backend-Storage-Policy-Index`` to object servers (the
container's policy) and to container servers on a container PUT; container servers answer
with it (from the container DB) so the proxy learns a container's policy from its info.
"""

from __future__ import annotations

import configparser
import os
import re
from dataclasses import dataclass, field

from swiftlite.common.config import config_true

POLICY_INDEX_HEADER = "X-Backend-Storage-Policy-Index"
# Sent with a container PUT that named no policy: the index to use if the PUT creates it.
POLICY_DEFAULT_HEADER = "X-Backend-Storage-Policy-Default"
CONTAINER_POLICY_KEY = "x-backend-storage-policy-index"  # in the container DB's metadata
OBJECTS = "objects"
TYPES = ("replication",)
_SECTION = re.compile(r"^storage-policy:(\d+)$")
_NAME = re.compile(r"^[A-Za-z0-9-]+$")


class PolicyError(ValueError):
    """A swiftlite.conf whose policies are inconsistent (the server refuses to start)."""


@dataclass(frozen=True)
class Policy:
    index: int
    name: str
    aliases: tuple[str, ...] = ()
    is_default: bool = False
    is_deprecated: bool = False
    policy_type: str = "replication"

    @property
    def ring_name(self) -> str:
        """`object` or `object-N`: the ring file is `<ring_name>.ring.gz`."""
        return "object" if self.index == 0 else f"object-{self.index}"

    @property
    def datadir(self) -> str:
        return data_dir(self.index)

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    def info(self) -> dict:
        """This policy in /info's `swift.policies` list (as Swift shows it)."""
        out: dict = {"name": self.name, "aliases": ", ".join(self.names)}
        if self.is_default:
            out["default"] = True
        if self.is_deprecated:
            out["deprecated"] = True
        return out


def data_dir(index: int) -> str:
    """The directory under a device that holds policy `index`'s objects."""
    return OBJECTS if index == 0 else f"{OBJECTS}-{index}"


def index_of_datadir(name: str) -> int | None:
    """`objects` -> 0, `objects-3` -> 3, anything else None."""
    if name == OBJECTS:
        return 0
    if name.startswith(OBJECTS + "-") and name[len(OBJECTS) + 1:].isdigit():
        return int(name[len(OBJECTS) + 1:])
    return None


@dataclass
class Policies:
    by_index: dict[int, Policy] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._by_name = {n.lower(): p for p in self.by_index.values() for n in p.names}

    def __iter__(self):
        return iter(sorted(self.by_index.values(), key=lambda p: p.index))

    def __len__(self) -> int:
        return len(self.by_index)

    @property
    def default(self) -> Policy:
        return next(p for p in self.by_index.values() if p.is_default)

    def get(self, index: int) -> Policy | None:
        return self.by_index.get(index)

    def by_name(self, name: str) -> Policy | None:
        return self._by_name.get(name.strip().lower())

    def name_of(self, index: int) -> str:
        p = self.by_index.get(index)
        return p.name if p else f"Policy-{index}"

    def info(self) -> list[dict]:
        return [p.info() for p in self]


def single() -> Policies:
    return Policies({0: Policy(0, "Policy-0", is_default=True)})


def parse(parser: configparser.ConfigParser) -> Policies:
    """The policies of a parsed swiftlite.conf (PolicyError when inconsistent)."""
    found: dict[int, Policy] = {}
    for section in parser.sections():
        m = _SECTION.match(section)
        if not m:
            continue
        idx = int(m.group(1))

        def get(key: str, d: str = "", section: str = section) -> str:
            return parser.get(section, key, fallback=d).strip()
        ptype = get("policy_type", "replication").lower()
        if ptype == "erasure_coding":
            raise PolicyError(f"[{section}] policy_type = erasure_coding is not built yet; "
                              "only replication policies are supported")
        if ptype not in TYPES:
            raise PolicyError(f"[{section}] unknown policy_type {ptype!r}")
        name = get("name", "Policy-0" if idx == 0 else "")
        aliases = tuple(a.strip() for a in get("aliases").split(",") if a.strip())
        for n in (name, *aliases):
            if not n or not _NAME.match(n):
                raise PolicyError(f"[{section}] invalid policy name {n!r} "
                                  "(letters, digits and '-' only)")
        found[idx] = Policy(idx, name, tuple(a for a in aliases if a.lower() != name.lower()),
                            config_true(get("default", "no")),
                            config_true(get("deprecated", "no")), ptype)
    if not found:
        return single()
    if 0 not in found:  # containers made before policies were configured are on 0
        found[0] = Policy(0, "Policy-0")
    seen: dict[str, int] = {}
    for p in found.values():
        for n in p.names:
            if n.lower() in seen and seen[n.lower()] != p.index:
                raise PolicyError(f"policy name {n!r} is used twice")
            seen[n.lower()] = p.index
    defaults = [p for p in found.values() if p.is_default]
    if len(defaults) > 1:
        raise PolicyError("more than one storage policy says default = yes")
    if defaults and defaults[0].is_deprecated:
        raise PolicyError("the default storage policy cannot be deprecated")
    if not defaults:
        live = sorted(i for i, p in found.items() if not p.is_deprecated)
        if not live:
            raise PolicyError("every storage policy is deprecated")
        p = found[live[0]]
        found[p.index] = Policy(p.index, p.name, p.aliases, True, False, p.policy_type)
    return Policies(found)


_loaded: dict[str, Policies] = {}


def load(swift_dir: str) -> Policies:
    """The policies of `<swift_dir>/swiftlite.conf` (one default policy without the file)."""
    path = os.path.join(swift_dir, "swiftlite.conf")
    if path not in _loaded:
        parser = configparser.ConfigParser(interpolation=None)
        parser.read(path)  # a missing file: policy 0 alone
        _loaded[path] = parse(parser)
    return _loaded[path]


def header_index(headers, default: int = 0) -> int:
    """X-Backend-Storage-Policy-Index of a backend request (`default` when absent)."""
    raw = headers.get(POLICY_INDEX_HEADER)
    if raw is None or raw == "":
        return default
    try:
        idx = int(raw)
    except ValueError:
        raise ValueError(f"Invalid {POLICY_INDEX_HEADER}") from None
    if idx < 0:
        raise ValueError(f"Invalid {POLICY_INDEX_HEADER}")
    return idx
