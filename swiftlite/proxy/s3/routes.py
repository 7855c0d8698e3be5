"""Which handler serves an S3 request: a table keyed by (level, method, sub-resource).

Each resource module registers its handlers with `@route(...)`, so adding an operation is a
decorator in its own module, not a branch in the middleware. Levels are "service" (no
bucket), "bucket" and "object"; the sub-resource is a query parameter naming what the request
is about (`acl`, `tagging`, `uploads`, ...), or "" for the plain operation.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from swiftlite.proxy.s3.errors import S3Error, not_implemented

Handler = Callable[[Any], Awaitable[Any]]

ROUTES: dict[tuple[str, str, str], Handler] = {}

# S3's sub-resources: a query parameter of these names asks for an operation of its own, so
# one with no handler here is NotImplemented rather than served as the plain operation.
SUBRESOURCES = frozenset((
    "acl", "policy", "cors", "lifecycle", "website", "logging", "notification",
    "replication", "encryption", "object-lock", "retention", "legal-hold", "accelerate",
    "requestPayment", "analytics", "inventory", "metrics", "intelligent-tiering",
    "ownershipControls", "publicAccessBlock", "torrent", "restore", "select",
    "policyStatus", "attributes", "tagging", "versioning", "versions", "location",
    "uploads", "uploadId", "delete"))


def route(level: str, method: str, sub: str = "") -> Callable[[Handler], Handler]:
    """Register the decorated coroutine for `method` on `level`, with sub-resource `sub`."""
    def register(handler: Handler) -> Handler:
        key = (level, method, sub)
        if key in ROUTES:
            raise ValueError(f"two S3 handlers for {key}")
        ROUTES[key] = handler
        return handler
    return register


def handler_for(level: str, method: str, query: Mapping[str, str]) -> Handler:
    """The handler for a request, or the S3 error saying there is none: the first query
    parameter with a route of its own wins, then the plain operation, unless the query names
    a sub-resource this front end lacks."""
    for name in query:
        found = ROUTES.get((level, method, name))
        if found is not None:
            return found
    for name in query:
        if name in SUBRESOURCES:
            if any(k[0] == level and k[2] == name for k in ROUTES):
                raise method_not_allowed(method, level)
            raise not_implemented()
    found = ROUTES.get((level, method, ""))
    if found is None:
        raise method_not_allowed(method, level)
    return found


def method_not_allowed(method: str, level: str = "object") -> S3Error:
    return S3Error("MethodNotAllowed", 405, "The specified method is not allowed against "
                   "this resource.", Method=method,
                   ResourceType="BUCKET" if level == "bucket" else "OBJECT")
