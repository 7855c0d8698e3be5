"""Storage policies: which object ring and data directory a container's objects use.

Configured in ``<swift_dir>/swiftlite.conf``, one section per policy::

    [storage-policy:0]
    name = Policy-0
    aliases = gold, standard
    default = yes
    deprecated = no
    policy_type = replication

    [storage-policy:1]
    name = ec
    policy_type = erasure_coding
    ec_type = liberasurecode_rs_vand     # default; any pyeclib ec_type this build can use
    ec_num_data_fragments = 4            # k, required
    ec_num_parity_fragments = 2          # m, required
    ec_object_segment_size = 1048576     # bytes per encoded segment (default 1 MiB)
    small_object_policy = Policy-0       # optional: objects of at most small_object_size
    small_object_size = 16384            # bytes go to this replicated policy instead

Invariants:
- With no ``[storage-policy:N]`` section at all there is exactly one policy, index 0, named
  ``Policy-0``, default: every cluster configured before policies existed works unchanged.
- Policy 0 always exists (a container made before policies is on it); exactly one policy is
  the default (the first non-deprecated one when none says so); names and aliases are unique
  case-insensitively; the default is never deprecated.
- Policy N's objects are placed by ``object.ring.gz`` (N = 0) or ``object-N.ring.gz`` and
  live under ``<device>/objects`` (N = 0) or ``<device>/objects-N``, each with its own
  partitions, suffix digests and journals; policy 0's layout is exactly the pre-policy one.
- An ``erasure_coding`` policy has an `ECScheme` (``Policy.ec``, swiftlite/common/ec/),
  made and checked at load (bad values refuse the config); its ring must have k + m replicas
  (`check_ring`, called where rings are loaded): archive i goes to the i-th primary. Policy
  0 is never erasure-coded (its layout stays the pre-policy one), and ``ec_*`` keys in a
  replicated policy's section are refused rather than ignored.
- An erasure-coded policy may name a replicated one as its small-object tier
  (``small_object_policy``, ``Policy.small``): an object of its containers no larger than
  ``small_object_size`` is stored under that policy (its ring, data dir and replication),
  because k + m archives of a few KiB each cost more disk blocks and far more I/O than
  three replicas (README "Erasure-coded policies"). The container's rows record where each
  object is (the tier's index), and the container-reconciler leaves those rows alone.

Backend protocol: the proxy sends ``X-Backend-Storage-Policy-Index`` to object servers (the
container's policy) and to container servers on a container PUT; container servers answer
with it (from the container DB) so the proxy learns a container's policy from its info.
"""

from __future__ import annotations

import configparser
import os
import re
from dataclasses import dataclass, field, replace
from typing import Any

from swiftlite.common.config import config_true
from swiftlite.common.ec.scheme import DEFAULT_EC_TYPE, DEFAULT_SEGMENT_SIZE, ECError, ECScheme

POLICY_INDEX_HEADER = "X-Backend-Storage-Policy-Index"
# Sent with a container PUT that named no policy: the index to use if the PUT creates it.
POLICY_DEFAULT_HEADER = "X-Backend-Storage-Policy-Default"
# On an object DELETE: write the tombstone only over a current .data (else 404, nothing
# written). The proxy clears an older copy from the other tier of an EC policy with it.
IF_PRESENT_HEADER = "X-Backend-If-Present"
CONTAINER_POLICY_KEY = "x-backend-storage-policy-index"  # in the container DB's metadata
OBJECTS = "objects"
REPLICATION = "replication"
ERASURE_CODING = "erasure_coding"
TYPES = (REPLICATION, ERASURE_CODING)
EC_KEYS = ("ec_type", "ec_num_data_fragments", "ec_num_parity_fragments",
           "ec_object_segment_size", "small_object_policy", "small_object_size")
DEFAULT_SMALL_OBJECT_SIZE = 16384
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
    policy_type: str = REPLICATION
    ec: ECScheme | None = None  # erasure_coding only
    # erasure_coding only: (replicated policy index, size in bytes): objects of at most that
    # size are stored under that policy instead.
    small: tuple[int, int] | None = None

    @property
    def is_ec(self) -> bool:
        return self.ec is not None

    @property
    def replicas(self) -> int | None:
        """The replica count its ring must have (k + m for EC), None when any will do."""
        return self.ec.n if self.ec is not None else None

    def check_ring(self, ring: Any) -> None:
        """PolicyError unless `ring` (a loaded ring) fits this policy: an EC policy's ring
        has exactly k + m replicas, one per fragment archive."""
        want = self.replicas
        if want is not None and ring.replica_count != want:
            raise PolicyError(f"storage policy {self.index} ({self.name}) is {self.ec}: its "
                              f"ring {self.ring_name}.ring.gz must have {want} replicas, "
                              f"not {ring.replica_count}")

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
        out["policy_type"] = self.policy_type
        if self.ec is not None:
            out.update(ec_type=self.ec.ec_type, ec_num_data_fragments=self.ec.k,
                       ec_num_parity_fragments=self.ec.m,
                       ec_object_segment_size=self.ec.segment_size)
        if self.small is not None:
            out["small_object_size"] = self.small[1]
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
    tiers: dict[int, tuple[str, str]] = {}
    for section in parser.sections():
        m = _SECTION.match(section)
        if not m:
            continue
        idx = int(m.group(1))

        def get(key: str, d: str = "", section: str = section) -> str:
            return parser.get(section, key, fallback=d).strip()
        ptype = get("policy_type", REPLICATION).lower()
        if ptype not in TYPES:
            raise PolicyError(f"[{section}] unknown policy_type {ptype!r} "
                              f"(one of {', '.join(TYPES)})")
        ec = _ec_scheme(section, get) if ptype == ERASURE_CODING else None
        if ec is not None and idx == 0:
            # Policy 0 holds every container made before policies: its layout stays the
            # replicated one.
            raise PolicyError(f"[{section}] policy 0 cannot be erasure_coding")
        if ec is None:
            stray = [k for k in EC_KEYS if parser.has_option(section, k)]
            if stray:
                raise PolicyError(f"[{section}] {', '.join(stray)} only apply to "
                                  "policy_type = erasure_coding")
        name = get("name", "Policy-0" if idx == 0 else "")
        aliases = tuple(a.strip() for a in get("aliases").split(",") if a.strip())
        for n in (name, *aliases):
            if not n or not _NAME.match(n):
                raise PolicyError(f"[{section}] invalid policy name {n!r} "
                                  "(letters, digits and '-' only)")
        found[idx] = Policy(idx, name, tuple(a for a in aliases if a.lower() != name.lower()),
                            config_true(get("default", "no")),
                            config_true(get("deprecated", "no")), ptype, ec)
        if ec is not None and get("small_object_policy"):
            tiers[idx] = (get("small_object_policy"),
                          get("small_object_size", str(DEFAULT_SMALL_OBJECT_SIZE)))
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
        found[p.index] = Policy(p.index, p.name, p.aliases, True, False, p.policy_type, p.ec)
    for idx, (tier_name, size_text) in tiers.items():
        tier = next((p for p in found.values()
                     if tier_name.lower() in (n.lower() for n in p.names)), None)
        where = f"[storage-policy:{idx}] small_object_policy"
        if tier is None or tier.is_ec:
            raise PolicyError(f"{where} = {tier_name}: not a replicated policy of this file")
        if tier.is_deprecated:
            raise PolicyError(f"{where} = {tier_name}: that policy is deprecated")
        if not size_text.isdigit() or int(size_text) < 1:
            raise PolicyError(f"[storage-policy:{idx}] small_object_size must be a positive "
                              f"number of bytes, not {size_text!r}")
        found[idx] = replace(found[idx], small=(tier.index, int(size_text)))
    return Policies(found)


def _ec_scheme(section: str, get: Any) -> ECScheme:
    """The ECScheme of an erasure_coding section; PolicyError naming what is wrong."""
    def integer(key: str, default: int | None = None) -> int:
        raw = get(key)
        if not raw:
            if default is None:
                raise PolicyError(f"[{section}] policy_type = erasure_coding needs {key}")
            return default
        try:
            return int(raw)
        except ValueError:
            raise PolicyError(f"[{section}] {key} must be an integer, not {raw!r}") from None
    k = integer("ec_num_data_fragments")
    m = integer("ec_num_parity_fragments")
    size = integer("ec_object_segment_size", DEFAULT_SEGMENT_SIZE)
    ec_type = get("ec_type") or DEFAULT_EC_TYPE
    try:
        scheme = ECScheme(k, m, ec_type, size)
        scheme.fragment_size(1)  # makes the driver: an ec_type this build lacks fails here
    except ECError as e:
        raise PolicyError(f"[{section}] invalid erasure coding scheme: {e}") from None
    return scheme


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
