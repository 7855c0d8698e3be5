"""TempAuth's owner verdict: kept for the last identity asked about, never for another."""

from __future__ import annotations

import secrets

from swiftlite.common.config import Section
from swiftlite.proxy.auth import TempAuth


def _auth() -> TempAuth:
    return TempAuth(Section({"auth_secret": secrets.token_hex(32),
                             "user_test_tester": "testing .admin",
                             "user_test_reader": "reading",
                             "user_other_admin": "secret .admin"}))


def _ident(auth: TempAuth, user: str):
    token, _ = auth.issue_token(auth.users[user])
    ident = auth.validate(token)
    assert ident is not None
    return ident


def test_owner_verdicts_follow_the_identity_and_account_asked_about():
    auth = _auth()
    admin, reader, other = (_ident(auth, u) for u in ("test:tester", "test:reader",
                                                      "other:admin"))
    # Interleaved, as concurrent requests ask: each answer is its own identity's.
    for _ in range(2):
        assert auth.is_owner(admin, "AUTH_test")
        assert not auth.is_owner(reader, "AUTH_test")
        assert not auth.is_owner(admin, "AUTH_other")
        assert auth.is_owner(other, "AUTH_other")
        assert not auth.is_owner(other, "AUTH_test")
        assert not auth.is_owner(None, "AUTH_test")
    # An account ACL's admin grant is a new identity, judged afresh.
    assert not auth.is_owner(reader, "AUTH_test")
    assert auth.is_owner(reader.with_grant("AUTH_test", "admin"), "AUTH_test")
    assert not auth.is_owner(reader, "AUTH_test")
