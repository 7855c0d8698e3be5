"""Bucket policies: the JSON access-policy language of S3, parsed, checked and evaluated.

A policy is a list of statements, each `Effect` (Allow/Deny) for a `Principal` (or every
principal but a `NotPrincipal`), an `Action` (or `NotAction`) and a `Resource` (or
`NotResource`), under optional `Condition`s. `parse` refuses with MalformedPolicy (400)
anything this module could not evaluate exactly as written: bad JSON, an unknown effect,
action or condition operator, a resource outside the policy's own bucket, a document over
20 KiB. `evaluate` is pure: "Deny" if a matching statement denies, else "Allow" if one
allows, else None (the policy says nothing: ACLs decide). A policy is only ever evaluated
for requests on its own bucket (its resources are checked against that bucket when stored),
so one bucket's policy never grants anything on another.

Principals are tempauth users: `arn:aws:iam::<account>:root` (or the bare account name)
is every user of that account, `arn:aws:iam::<account>:user/<name>` one user, `"*"` (or
`{"AWS": "*"}`) anyone, anonymous callers included; a CanonicalUser id is the user's
`account:user` or its account.
"""

from __future__ import annotations

import datetime
import functools
import ipaddress
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from swiftlite.proxy.s3.errors import S3Error

MAX_POLICY = 20 * 1024
VERSIONS = ("2012-10-17", "2008-10-17")
ARN_PREFIX = "arn:aws:s3:::"

# Every action a bucket policy may name (without the `s3:` prefix), lower case: names are
# matched without regard to case, as AWS does.
ACTIONS = frozenset(a.lower() for a in (
    "AbortMultipartUpload", "BypassGovernanceRetention", "CreateBucket", "DeleteBucket",
    "DeleteBucketOwnershipControls", "DeleteBucketPolicy", "DeleteBucketWebsite",
    "DeleteObject", "DeleteObjectTagging", "DeleteObjectVersion",
    "DeleteObjectVersionTagging", "GetAccelerateConfiguration", "GetAnalyticsConfiguration",
    "GetBucketAcl", "GetBucketCORS", "GetBucketLocation", "GetBucketLogging",
    "GetBucketNotification", "GetBucketObjectLockConfiguration",
    "GetBucketOwnershipControls", "GetBucketPolicy", "GetBucketPolicyStatus",
    "GetBucketPublicAccessBlock", "GetBucketRequestPayment", "GetBucketTagging",
    "GetBucketVersioning", "GetBucketWebsite", "GetEncryptionConfiguration",
    "GetIntelligentTieringConfiguration", "GetInventoryConfiguration",
    "GetLifecycleConfiguration", "GetMetricsConfiguration", "GetObject", "GetObjectAcl",
    "GetObjectAttributes", "GetObjectLegalHold", "GetObjectRetention", "GetObjectTagging",
    "GetObjectTorrent", "GetObjectVersion", "GetObjectVersionAcl",
    "GetObjectVersionAttributes", "GetObjectVersionForReplication", "GetObjectVersionTagging",
    "GetObjectVersionTorrent", "GetReplicationConfiguration", "ListAllMyBuckets",
    "ListBucket", "ListBucketMultipartUploads", "ListBucketVersions",
    "ListMultipartUploadParts", "ObjectOwnerOverrideToBucketOwner", "PutAccelerateConfiguration",
    "PutAnalyticsConfiguration", "PutBucketAcl", "PutBucketCORS", "PutBucketLogging",
    "PutBucketNotification", "PutBucketObjectLockConfiguration", "PutBucketOwnershipControls",
    "PutBucketPolicy", "PutBucketPublicAccessBlock", "PutBucketRequestPayment",
    "PutBucketTagging", "PutBucketVersioning", "PutBucketWebsite",
    "PutEncryptionConfiguration", "PutIntelligentTieringConfiguration",
    "PutInventoryConfiguration", "PutLifecycleConfiguration", "PutMetricsConfiguration",
    "PutObject", "PutObjectAcl", "PutObjectLegalHold", "PutObjectRetention",
    "PutObjectTagging", "PutObjectVersionAcl", "PutObjectVersionTagging",
    "PutReplicationConfiguration", "ReplicateDelete", "ReplicateObject", "ReplicateTags",
    "RestoreObject"))

# Condition operators, by the family that says how values compare.
# (ignore case, wildcards) per string operator; which ones negate is NEGATED's say.
_STRING = {"StringEquals": (False, False), "StringNotEquals": (False, False),
           "StringEqualsIgnoreCase": (True, False), "StringNotEqualsIgnoreCase": (True, False),
           "StringLike": (False, True), "StringNotLike": (False, True),
           "ArnEquals": (False, True), "ArnLike": (False, True),
           "ArnNotEquals": (False, True), "ArnNotLike": (False, True)}
# A "Not" operator compares as its positive twin; NEGATED turns the answer round.
_NUMERIC = {"NumericEquals": "==", "NumericNotEquals": "==", "NumericLessThan": "<",
            "NumericLessThanEquals": "<=", "NumericGreaterThan": ">",
            "NumericGreaterThanEquals": ">="}
_DATE = {"DateEquals": "==", "DateNotEquals": "==", "DateLessThan": "<",
         "DateLessThanEquals": "<=", "DateGreaterThan": ">", "DateGreaterThanEquals": ">="}
OPERATORS = frozenset((*_STRING, *_NUMERIC, *_DATE, "Bool", "BinaryEquals", "IpAddress",
                       "NotIpAddress", "Null"))
NEGATED = frozenset(("StringNotEquals", "StringNotEqualsIgnoreCase", "StringNotLike",
                     "ArnNotEquals", "ArnNotLike", "NumericNotEquals", "DateNotEquals",
                     "NotIpAddress"))

# Condition keys that tie an Allow to fixed callers or networks: with one of these (and a
# value that is no wildcard) a statement for "*" is not public (GetBucketPolicyStatus).
RESTRICTING_KEYS = frozenset(k.lower() for k in (
    "aws:SourceIp", "aws:SourceArn", "aws:SourceVpc", "aws:SourceVpce", "aws:SourceAccount",
    "aws:SourceOwner", "aws:PrincipalOrgID", "aws:PrincipalAccount", "aws:PrincipalArn",
    "aws:userid", "aws:username", "s3:DataAccessPointArn", "s3:DataAccessPointAccount"))


def malformed_policy(message: str) -> S3Error:
    return S3Error("MalformedPolicy", 400, message)


# ---- the parsed document -------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Principal:
    """Who asks: a tempauth account and user (`account:user`); account None is anonymous."""

    account: str | None
    user: str | None = None


ANONYMOUS = Principal(None)


@dataclass(frozen=True, slots=True)
class Condition:
    operator: str  # the base operator: "StringEquals", "IpAddress", ...
    key: str  # normalised (see norm_key)
    values: tuple[str, ...]
    if_exists: bool = False
    qualifier: str = ""  # "", "ForAnyValue" or "ForAllValues"


@dataclass(frozen=True, slots=True)
class Statement:
    effect: str  # "Allow" | "Deny"
    principals: tuple[tuple[str, str], ...]  # (kind, value): ("AWS", "*"), ...
    not_principal: bool
    actions: tuple[str, ...]  # lower case, wildcards kept
    not_action: bool
    resources: tuple[str, ...]
    not_resource: bool
    conditions: tuple[Condition, ...]


@dataclass(frozen=True, slots=True)
class Policy:
    statements: tuple[Statement, ...]
    text: str  # as the client sent it: GetBucketPolicy answers it byte for byte


def norm_key(key: str) -> str:
    """A condition key as compared: its name without regard to case, and what follows a
    `/` (a tag key, say `s3:ExistingObjectTag/Team`) as written."""
    name, sep, rest = key.partition("/")
    return name.lower() + sep + rest


@functools.lru_cache(maxsize=4096)
def _glob(pattern: str, ignore_case: bool = False) -> re.Pattern[str]:
    """`*` any run of characters, `?` any one, the rest literal."""
    out = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(out, re.DOTALL | (re.IGNORECASE if ignore_case else 0))


def glob_match(pattern: str, value: str, ignore_case: bool = False) -> bool:
    if "*" not in pattern and "?" not in pattern:
        return pattern.lower() == value.lower() if ignore_case else pattern == value
    return _glob(pattern, ignore_case).fullmatch(value) is not None


# ---- parsing and checking ------------------------------------------------------------------

def _strings(value: Any, what: str) -> tuple[str, ...]:
    """A policy field that is one string or a non-empty list of strings."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or \
            not all(isinstance(v, str) and v for v in items):
        raise malformed_policy(f"Policy has an invalid {what}")
    return tuple(items)


def _scalar(value: Any) -> str:
    """A condition value as a string (JSON numbers and booleans are allowed)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise malformed_policy("Policy has an invalid condition value")


def _principals(value: Any) -> tuple[tuple[str, str], ...]:
    if value == "*":
        return (("AWS", "*"),)
    if not isinstance(value, dict) or not value:
        raise malformed_policy("Invalid principal in policy")
    out: list[tuple[str, str]] = []
    for kind, ids in value.items():
        if kind not in ("AWS", "CanonicalUser", "Service", "Federated"):
            raise malformed_policy("Invalid principal in policy")
        out.extend((kind, v) for v in _strings(ids, "principal"))
    return tuple(out)


def _actions(value: Any) -> tuple[str, ...]:
    out = []
    for action in _strings(value, "action"):
        low = action.lower()
        if low == "*":
            out.append(low)
            continue
        service, sep, name = low.partition(":")
        if service != "s3" or not sep or not name:
            raise malformed_policy("Policy has invalid action")
        if "*" not in name and "?" not in name and name not in ACTIONS:
            raise malformed_policy("Policy has invalid action")
        out.append(low)
    return tuple(out)


def _resources(value: Any, bucket: str) -> tuple[str, ...]:
    out = _strings(value, "resource")
    for arn in out:
        if not arn.startswith(ARN_PREFIX):
            raise malformed_policy("Policy has invalid resource")
        # Only this bucket and its objects: a resource whose bucket part cannot name this
        # bucket would be a grant the policy's owner has no say over.
        bucket_part = arn[len(ARN_PREFIX):].split("/", 1)[0]
        if not glob_match(bucket_part, bucket):
            raise malformed_policy("Policy has invalid resource")
    return out


def _conditions(value: Any) -> tuple[Condition, ...]:
    if not isinstance(value, dict):
        raise malformed_policy("Policy has an invalid condition")
    out: list[Condition] = []
    for op_name, block in value.items():
        qualifier, sep, operator = op_name.partition(":")
        if not sep:
            qualifier, operator = "", op_name
        elif qualifier not in ("ForAnyValue", "ForAllValues"):
            raise malformed_policy(f"Policy has an invalid condition operator: {op_name}")
        if_exists = operator.endswith("IfExists") and operator != "IfExists"
        if if_exists:
            operator = operator[:-len("IfExists")]
        if operator not in OPERATORS or (if_exists and operator == "Null"):
            raise malformed_policy(f"Policy has an invalid condition operator: {op_name}")
        if not isinstance(block, dict) or not block:
            raise malformed_policy("Policy has an invalid condition")
        for key, values in block.items():
            if not isinstance(key, str) or ":" not in key:
                raise malformed_policy(f"Policy has an invalid condition key: {key}")
            items = values if isinstance(values, list) else [values]
            if not items:
                raise malformed_policy("Policy has an invalid condition value")
            vals = tuple(_scalar(v) for v in items)
            _check_values(operator, vals)
            out.append(Condition(operator, norm_key(key), vals, if_exists, qualifier))
    return tuple(out)


def _check_values(operator: str, values: tuple[str, ...]) -> None:
    """Values the operator could never compare are refused now, not ignored later."""
    try:
        for v in values:
            if operator in _NUMERIC:
                float(v)
            elif operator in _DATE:
                _date(v)
            elif operator in ("IpAddress", "NotIpAddress"):
                ipaddress.ip_network(v, strict=False)
            elif operator in ("Bool", "Null") and v.lower() not in ("true", "false"):
                raise ValueError(v)
    except ValueError:
        raise malformed_policy(f"Policy has an invalid condition value for {operator}") \
            from None


STATEMENT_FIELDS = frozenset(("Sid", "Effect", "Principal", "NotPrincipal", "Action",
                              "NotAction", "Resource", "NotResource", "Condition"))


def _statement(st: Any, bucket: str) -> Statement:
    if not isinstance(st, dict):
        raise malformed_policy("Policy has an invalid statement")
    unknown = set(st) - STATEMENT_FIELDS
    if unknown:
        raise malformed_policy(f"Unknown field {sorted(unknown)[0]}")
    effect = st.get("Effect")
    if effect not in ("Allow", "Deny"):
        raise malformed_policy("Invalid effect: " + str(effect))
    if ("Principal" in st) == ("NotPrincipal" in st):
        raise malformed_policy("Missing required field Principal")
    if "NotPrincipal" in st and effect == "Allow":
        # "everyone but ..." as a grant is a public grant nobody means; AWS refuses it too.
        raise malformed_policy("NotPrincipal is only allowed with Deny")
    if ("Action" in st) == ("NotAction" in st):
        raise malformed_policy("Missing required field Action")
    if ("Resource" in st) == ("NotResource" in st):
        raise malformed_policy("Missing required field Resource")
    if "Sid" in st and not isinstance(st["Sid"], str):
        raise malformed_policy("Policy has an invalid Sid")
    return Statement(
        effect,
        _principals(st["Principal"] if "Principal" in st else st["NotPrincipal"]),
        "NotPrincipal" in st,
        _actions(st["Action"] if "Action" in st else st["NotAction"]),
        "NotAction" in st,
        _resources(st["Resource"] if "Resource" in st else st["NotResource"], bucket),
        "NotResource" in st,
        _conditions(st.get("Condition", {})))


def parse(text: str | bytes, bucket: str) -> Policy:
    """The policy `text` for `bucket`, checked; MalformedPolicy for anything wrong."""
    if isinstance(text, bytes):
        if len(text) > MAX_POLICY:
            raise malformed_policy("Policies must be no larger than 20 KB")
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise malformed_policy("This policy contains invalid Json") from None
    if len(text.encode("utf-8", "surrogateescape")) > MAX_POLICY:
        raise malformed_policy("Policies must be no larger than 20 KB")
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        raise malformed_policy("This policy contains invalid Json") from None
    if not isinstance(doc, dict):
        raise malformed_policy("This policy contains invalid Json")
    unknown = set(doc) - {"Version", "Id", "Statement"}
    if unknown:
        raise malformed_policy(f"Unknown field {sorted(unknown)[0]}")
    if "Version" in doc and doc["Version"] not in VERSIONS:
        raise malformed_policy("The policy must contain a valid version string")
    if "Id" in doc and not isinstance(doc["Id"], str):
        raise malformed_policy("Policy has an invalid Id")
    statements = doc.get("Statement")
    if isinstance(statements, dict):
        statements = [statements]
    if not isinstance(statements, list) or not statements:
        raise malformed_policy("Missing required field Statement")
    sids = [st.get("Sid") for st in statements if isinstance(st, dict) and "Sid" in st]
    if len(sids) != len(set(map(str, sids))):
        raise malformed_policy("Statement IDs (SID) in a single policy must be unique")
    return Policy(tuple(_statement(st, bucket) for st in statements), text)


@functools.lru_cache(maxsize=1024)
def parse_stored(text: str, bucket: str) -> Policy | None:
    """A stored policy, parsed once per worker (stored text was checked when put; None if
    it no longer parses, which denies nothing and grants nothing)."""
    try:
        return parse(text, bucket)
    except S3Error:
        return None


# ---- evaluation ----------------------------------------------------------------------------

Context = Mapping[str, "str | Sequence[str]"]


def principal_matches(ids: tuple[tuple[str, str], ...], who: Principal) -> bool:
    for kind, value in ids:
        if value == "*" and kind in ("AWS", "CanonicalUser"):
            return True
        if who.account is None:
            continue
        if kind == "AWS":
            if value.startswith("arn:aws:iam::"):
                account, _, what = value[len("arn:aws:iam::"):].partition(":")
                if not glob_match(account, who.account):
                    continue
                if what == "root":
                    return True
                if what.startswith("user/") and who.user is not None and \
                        glob_match(f"{who.account}:{what[5:]}", who.user):
                    return True
            elif value == who.account:
                return True
        elif kind == "CanonicalUser" and value in (who.user, who.account):
            return True
    return False


def action_matches(patterns: tuple[str, ...], action: str) -> bool:
    action = action.lower()
    return any(p == "*" or glob_match(p, action) for p in patterns)


def _expand(pattern: str, ctx: Context) -> str | None:
    """Policy variables (`${aws:username}`, `${*}`, ...) replaced from the request; None
    when one names a key the request lacks (the element then matches nothing)."""
    if "${" not in pattern:
        return pattern
    out: list[str] = []
    rest = pattern
    while "${" in rest:
        head, _, tail = rest.partition("${")
        name, sep, rest = tail.partition("}")
        if not sep:
            return None
        out.append(head)
        if name in ("*", "?", "$"):
            out.append("\x00" + name)  # a literal, not a wildcard (see below)
            continue
        value = _values(ctx, norm_key(name))
        if value is None or len(value) != 1:
            return None
        out.append(value[0].replace("*", "\x00*").replace("?", "\x00?"))
    out.append(rest)
    return "".join(out)


def _pattern_matches(pattern: str, value: str, ctx: Context) -> bool:
    expanded = _expand(pattern, ctx)
    if expanded is None:
        return False
    if "\x00" not in expanded:
        return glob_match(expanded, value)
    # Escaped characters: match them literally by splitting the glob around them.
    parts = re.split(r"\x00(.)", expanded)
    regex = "".join(re.escape(p) if i % 2 else
                    "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in p)
                    for i, p in enumerate(parts))
    return re.fullmatch(regex, value, re.DOTALL) is not None


def resource_matches(patterns: tuple[str, ...], arn: str, ctx: Context) -> bool:
    return any(_pattern_matches(p, arn, ctx) for p in patterns)


def _values(ctx: Context, key: str) -> list[str] | None:
    value = ctx.get(key)
    if value is None:
        return None
    return [value] if isinstance(value, str) else list(value)


def _date(value: str) -> datetime.datetime:
    try:
        return datetime.datetime.fromtimestamp(float(value), datetime.UTC)
    except ValueError:
        pass
    out = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return out if out.tzinfo else out.replace(tzinfo=datetime.UTC)


_CMP = {"==": lambda a, b: a == b, "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}


def _one_matches(cond: Condition, have: str, want: str, ctx: Context) -> bool:
    """Whether one request value matches one policy value, before any negation."""
    op = cond.operator
    try:
        if op in _STRING:
            ignore_case, like = _STRING[op]
            if like:
                return _pattern_matches(want, have, ctx)
            expanded = _expand(want, ctx)
            if expanded is None:
                return False
            expanded = expanded.replace("\x00", "")
            return expanded.lower() == have.lower() if ignore_case else expanded == have
        if op in _NUMERIC:
            return _CMP[_NUMERIC[op]](float(have), float(want))
        if op in _DATE:
            return _CMP[_DATE[op]](_date(have), _date(want))
        if op == "Bool":
            return have.lower() == want.lower()
        if op == "BinaryEquals":
            return have == want
        if op in ("IpAddress", "NotIpAddress"):
            return ipaddress.ip_address(have) in ipaddress.ip_network(want, strict=False)
    except (ValueError, TypeError):
        return False
    return False


def condition_holds(cond: Condition, ctx: Context) -> bool:
    have = _values(ctx, cond.key)
    if cond.operator == "Null":
        absent = not have
        return any((v.lower() == "true") == absent for v in cond.values)
    negated = cond.operator in NEGATED
    if not have:
        if cond.qualifier == "ForAllValues":
            return True
        # A missing key matches nothing: a positive test fails, a negated one holds.
        return cond.if_exists or (negated and cond.qualifier != "ForAnyValue")

    def hit(v: str) -> bool:
        return any(_one_matches(cond, v, w, ctx) for w in cond.values)

    if cond.qualifier == "ForAllValues":
        return all(hit(v) != negated for v in have)
    if negated and cond.qualifier != "ForAnyValue":
        return not any(hit(v) for v in have)
    return any(hit(v) != negated for v in have)


def statement_applies(st: Statement, who: Principal, action: str, arn: str,
                      ctx: Context) -> bool:
    if principal_matches(st.principals, who) == st.not_principal:
        return False
    if action_matches(st.actions, action) == st.not_action:
        return False
    if resource_matches(st.resources, arn, ctx) == st.not_resource:
        return False
    return all(condition_holds(c, ctx) for c in st.conditions)


def evaluate(doc: Policy | None, principal: Principal, action: str, resource_arn: str,
             context: Context | None = None) -> str | None:
    """"Deny" when a statement denies `action` on `resource_arn` to `principal`, else
    "Allow" when one allows it, else None. `action` is `s3:Name`; context keys are
    normalised with norm_key."""
    if doc is None:
        return None
    ctx = context or {}
    allowed = False
    for st in doc.statements:
        if statement_applies(st, principal, action, resource_arn, ctx):
            if st.effect == "Deny":
                return "Deny"
            allowed = True
    return "Allow" if allowed else None


def may_allow(doc: Policy, principal: Principal, action: str) -> bool:
    """Whether some Allow statement names `principal` and `action`, whatever its resources
    and conditions (a request about many keys asks this first, then each key)."""
    return any(st.effect == "Allow" and
               principal_matches(st.principals, principal) != st.not_principal and
               action_matches(st.actions, action) != st.not_action
               for st in doc.statements)


def arn_of(bucket: str, key: str | None = None) -> str:
    return ARN_PREFIX + bucket + ("" if key is None else "/" + key)


# ---- public or not -------------------------------------------------------------------------

def _restricts(cond: Condition) -> bool:
    """Whether a condition pins a statement to fixed callers (so it is not public)."""
    if cond.operator in NEGATED or cond.operator == "Null" or \
            cond.key not in RESTRICTING_KEYS:
        return False
    for value in cond.values:
        if "*" in value or "?" in value:
            return False
        if cond.key == "aws:sourceip":
            try:
                if ipaddress.ip_network(value, strict=False).prefixlen == 0:
                    return False
            except ValueError:
                return False
    return True


def _principal_is_public(ids: tuple[tuple[str, str], ...]) -> bool:
    for kind, value in ids:
        if kind not in ("AWS", "CanonicalUser"):
            continue
        if value == "*":
            return True
        if value.startswith("arn:aws:iam::") and \
                value[len("arn:aws:iam::"):].partition(":")[0] in ("*", ""):
            return True
    return False


def is_public(doc: Policy | None) -> bool:
    """Whether the policy grants anything to anyone at all (GetBucketPolicyStatus, and
    what BlockPublicPolicy refuses): an Allow for "*" with no condition pinning callers."""
    if doc is None:
        return False
    for st in doc.statements:
        if st.effect != "Allow" or st.not_principal:
            continue
        if not _principal_is_public(st.principals):
            continue
        if any(_restricts(c) for c in st.conditions):
            continue
        return True
    return False
