"""S3 key pairs' sealing (proxy/s3/keys.py): a sealed secret opens only under the same
auth_secret and for the same key id, account and user; ids and secrets look like AWS's."""

from __future__ import annotations

import base64
import re

from swiftlite.proxy.s3.keys import Sealer, new_key_id, new_secret

SECRET_A = b"a-long-enough-auth-secret-for-the-tests-0001"
SECRET_B = b"a-long-enough-auth-secret-for-the-tests-0002"


def test_ids_and_secrets_look_like_aws():
    ids = {new_key_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(re.fullmatch(r"[A-Z0-9]{20}", i) for i in ids)
    assert all(re.fullmatch(r"[A-Za-z0-9+/]{40}", new_secret()) for _ in range(200))


def test_sealed_secret_opens_only_for_its_binding():
    sealer = Sealer(SECRET_A)
    secret = new_secret()
    sealed = sealer.seal("AKID0000000000000001", "AUTH_test", "test:tester3", secret)
    assert secret not in sealed and secret.encode() not in base64.b64decode(sealed)
    assert sealer.open("AKID0000000000000001", "AUTH_test", "test:tester3", sealed) == secret
    # Another id, account or user (a record copied or rebound) does not open.
    assert sealer.open("AKID0000000000000002", "AUTH_test", "test:tester3", sealed) is None
    assert sealer.open("AKID0000000000000001", "AUTH_test2", "test:tester3", sealed) is None
    assert sealer.open("AKID0000000000000001", "AUTH_test", "test:tester", sealed) is None
    # Nor under another auth_secret, nor tampered, nor junk.
    assert Sealer(SECRET_B).open("AKID0000000000000001", "AUTH_test", "test:tester3",
                                 sealed) is None
    raw = bytearray(base64.b64decode(sealed))
    raw[-1] ^= 1
    assert sealer.open("AKID0000000000000001", "AUTH_test", "test:tester3",
                       base64.b64encode(bytes(raw)).decode()) is None
    assert sealer.open("AKID0000000000000001", "AUTH_test", "test:tester3", "@@@") is None
    # Each seal draws a fresh nonce.
    assert sealer.seal("AKID0000000000000001", "AUTH_test", "test:tester3", secret) != sealed
