"""The loop-safe HMAC-SHA256 equals the standard library's for every key shape."""

import hmac
import os

import pytest

from swiftlite.common.hmacs import HmacSha256, hmac_sha256


@pytest.mark.parametrize("key_len", [0, 1, 32, 63, 64, 65, 200])
@pytest.mark.parametrize("msg_len", [0, 1, 55, 64, 1000, 5000])
def test_matches_hmac_digest(key_len, msg_len):
    key, msg = os.urandom(key_len), os.urandom(msg_len)
    want = hmac.digest(key, msg, "sha256")
    mac = HmacSha256(key)
    assert mac.digest(msg) == want
    assert mac.digest(msg) == want  # the keyed pads are not consumed by a use
    assert mac.hexdigest(msg) == want.hex()
    assert hmac_sha256(key, msg) == want
