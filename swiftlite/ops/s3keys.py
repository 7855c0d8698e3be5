"""`swiftlite s3-keys create|list|revoke`: S3 key pairs through the proxy's admin API
(swiftlite/proxy/s3/key_admin.py), as an account admin or reseller admin.

It authenticates at `--auth-url` (tempauth's /auth/v1.0) with `--user`/`--key`, then asks
the storage URL it is given (or `--account`'s, for a reseller admin). `create` prints the
new key as an ~/.aws/credentials profile: the secret is shown this once and never again.

Exit status: 0 done, 1 refused or not found (the proxy's reason on stderr), 2 no answer.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

QUERY = "s3-keys"


class Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status} {reason}".strip())
        self.status = status


def _call(method: str, url: str, headers: dict[str, str],
          timeout: float) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, method=method, headers=headers,
                                 data=b"" if method in ("POST", "DELETE") else None)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        body = exc.read().decode("utf-8", "replace").strip()
        raise Refused(exc.code, body or str(exc.reason)) from None


def authenticate(args: argparse.Namespace) -> tuple[str, str]:
    """(storage URL, token) of --user at --auth-url."""
    _, headers, _ = _call("GET", args.auth_url, {"X-Auth-User": args.user,
                                                 "X-Auth-Key": args.key}, args.timeout)
    token = headers.get("X-Auth-Token", "")
    url = headers.get("X-Storage-Url", "")
    if not token or not url:
        raise Refused(0, "the auth URL answered no token or storage URL")
    if args.account:
        base = url.rsplit("/", 1)[0]
        url = f"{base}/{urllib.parse.quote(args.account, safe='')}"
    return url, token


def _print_profile(key: dict[str, Any], profile: str, out: Any) -> None:
    print(f"# {key['user']} ({key['account']}), created {key['created']}", file=out)
    print(f"[{profile}]", file=out)
    print(f"aws_access_key_id = {key['access_key_id']}", file=out)
    print(f"aws_secret_access_key = {key['secret_access_key']}", file=out)


def run(args: argparse.Namespace, out: Any = None) -> int:
    out = out or sys.stdout
    try:
        url, token = authenticate(args)
        headers = {"X-Auth-Token": token}
        if args.action == "create":
            query = QUERY
            if args.for_user:
                query += "&user=" + urllib.parse.quote(args.for_user, safe="")
            _, _, body = _call("POST", f"{url}?{query}", headers, args.timeout)
            _print_profile(json.loads(body), args.profile, out)
        elif args.action == "list":
            _, _, body = _call("GET", f"{url}?{QUERY}", headers, args.timeout)
            keys = json.loads(body)
            if args.json:
                print(json.dumps(keys, indent=2), file=out)
            for k in [] if args.json else keys:
                print(f"{k['access_key_id']}  {k['user']}  {k['created']}", file=out)
        else:
            if not args.key_id:
                print("swiftlite s3-keys revoke: name the access key id", file=sys.stderr)
                return 2
            key_id = urllib.parse.quote(args.key_id, safe="")
            _call("DELETE", f"{url}?{QUERY}={key_id}", headers, args.timeout)
            print(f"revoked {args.key_id}", file=out)
    except Refused as exc:
        print(f"swiftlite s3-keys {args.action}: refused: {exc}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(f"swiftlite s3-keys {args.action}: no answer: {exc}", file=sys.stderr)
        return 2
    return 0


def add_parser(sub: Any) -> None:
    k = sub.add_parser("s3-keys", help="create, list or revoke S3 key pairs of an account")
    k.add_argument("action", choices=("create", "list", "revoke"))
    k.add_argument("key_id", nargs="?", default=None, help="revoke: the access key id")
    k.add_argument("--auth-url", required=True, help="tempauth's URL, .../auth/v1.0")
    k.add_argument("--user", "-U", required=True, help="account:user, an account admin")
    k.add_argument("--key", "-K", required=True, help="that user's password")
    k.add_argument("--for-user", default=None,
                   help="create: the user of the account the key acts as (default: --user)")
    k.add_argument("--account", default=None,
                   help="the account (AUTH_name) to act on (default: --user's own)")
    k.add_argument("--profile", default="default",
                   help="create: the ~/.aws/credentials profile name printed")
    k.add_argument("--json", action="store_true", help="list: JSON")
    k.add_argument("--timeout", type=float, default=30.0)
    k.set_defaults(func=cmd_s3_keys)


def cmd_s3_keys(args: argparse.Namespace) -> int:
    return run(args)
