"""Tempauth as Swift's, through the proxy of a real `swiftlite up` cluster: account ACLs
(X-Account-Access-Control) per level, their validation and revocation, owner-only headers,
service tokens (X-Service-Token on SERVICE_ accounts), reseller readers, and users of other
accounts."""

from __future__ import annotations

import http.client
import json
import urllib.parse
import uuid

import pytest
import swiftclient

ACL = "X-Account-Access-Control"


def raw(cluster, method: str, path: str, token: str | None = None,
        headers: dict | None = None, body: bytes | None = None):
    u = urllib.parse.urlsplit(cluster.proxy_url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    h = dict(headers or {})
    if token:
        h["X-Auth-Token"] = token
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, data


def token(cluster, user: str, key: str) -> str:
    return swiftclient.get_auth(cluster.auth_url, user, key)[1]


@pytest.fixture(scope="module")
def tokens(cluster) -> dict[str, str]:
    return {"owner": token(cluster, "test:tester", "testing"),
            "user3": token(cluster, "test:tester3", "testing3"),
            "other": token(cluster, "test2:tester2", "testing2"),
            "service": token(cluster, "test5:tester5", "testing5"),
            "reader": token(cluster, "admin:auditor", "admin_ro")}


@pytest.fixture
def acct(cluster, tokens):
    """AUTH_test with a container holding one object and no account ACL before and after."""
    cont = f"c-{uuid.uuid4().hex[:8]}"
    own = tokens["owner"]
    assert raw(cluster, "POST", "/v1/AUTH_test", own, {ACL: "{}"})[0] == 204
    assert raw(cluster, "PUT", f"/v1/AUTH_test/{cont}", own,
               {"X-Container-Read": "jdoe", "X-Container-Meta-Color": "red"})[0] == 201
    assert raw(cluster, "PUT", f"/v1/AUTH_test/{cont}/o", own, body=b"data")[0] == 201
    yield cont
    raw(cluster, "POST", "/v1/AUTH_test", own, {ACL: "{}"})


def grant(cluster, tokens, level: str, who: str = "test:tester3") -> str:
    value = json.dumps({level: [who]})
    assert raw(cluster, "POST", "/v1/AUTH_test", tokens["owner"], {ACL: value})[0] == 204
    return value


def test_info_advertises_account_acls(cluster):
    status, _, body = raw(cluster, "GET", "/info")
    assert status == 200 and json.loads(body)["tempauth"] == {"account_acls": True}


@pytest.mark.parametrize("value,reason", [
    ("invalid", "Syntax error in input ('invalid')"),
    ("[1]", "Syntax error in input ('[1]')"),
    ('{"admin":"x"}', 'Value for key "admin" must be a list'),
    ('{"foo":[]}', 'Key "foo" not recognized'),
    ('{"admin":[1]}', 'Elements of "admin" list must be strings'),
])
def test_invalid_account_acl_is_400_and_keeps_the_old_one(cluster, tokens, acct, value, reason):
    good = grant(cluster, tokens, "read-only")
    status, headers, body = raw(cluster, "POST", "/v1/AUTH_test", tokens["owner"],
                                {ACL: value})
    assert status == 400
    assert headers["content-type"] == "text/plain; charset=UTF-8"
    assert body.decode() == f"X-Account-Access-Control invalid: {reason}\n\nInput: {value}\n"
    # Checked before who may set it, and on any path of ours.
    assert raw(cluster, "POST", "/v1/AUTH_test", tokens["user3"], {ACL: value})[0] == 400
    assert raw(cluster, "POST", f"/v1/AUTH_test/{acct}", tokens["owner"], {ACL: value})[0] \
        == 400
    _, headers, _ = raw(cluster, "HEAD", "/v1/AUTH_test", tokens["owner"])
    assert json.loads(headers[ACL.lower()]) == json.loads(good)


def test_account_acl_header_line_limit(cluster, tokens, acct):
    # As Swift: a header line of max_header_size (8192) bytes or more is refused.
    big = json.dumps({"admin": [c * 1024 for c in "abcdefgh"]}, separators=(",", ":"))
    assert raw(cluster, "POST", "/v1/AUTH_test", tokens["owner"], {ACL: big})[0] == 400
    smaller = json.dumps({"admin": [c * 1024 for c in "abcdefg"]}, separators=(",", ":"))
    assert raw(cluster, "POST", "/v1/AUTH_test", tokens["owner"], {ACL: smaller})[0] == 204
    _, headers, _ = raw(cluster, "HEAD", "/v1/AUTH_test", tokens["owner"])
    assert headers[ACL.lower()] == smaller


def test_owner_sees_acl_normalised_never_as_sysmeta(cluster, tokens, acct):
    status, _, _ = raw(cluster, "POST", "/v1/AUTH_test", tokens["owner"],
                       {ACL: '{ "read-only": ["x"], "admin": ["bob"] }'})
    assert status == 204
    for method in ("HEAD", "GET"):
        status, headers, _ = raw(cluster, method, "/v1/AUTH_test", tokens["owner"])
        assert status // 100 == 2
        assert headers[ACL.lower()] == '{"admin":["bob"],"read-only":["x"]}'
        assert not [k for k in headers if "sysmeta" in k]
    # An empty ACL shows nothing.
    assert raw(cluster, "POST", "/v1/AUTH_test", tokens["owner"], {ACL: "{}"})[0] == 204
    assert ACL.lower() not in raw(cluster, "HEAD", "/v1/AUTH_test", tokens["owner"])[1]


def test_client_sent_acl_sysmeta_grants_nothing(cluster, tokens, acct):
    sysmeta = {"X-Account-Sysmeta-Core-Access-Control": '{"admin":["test:tester3"]}'}
    assert raw(cluster, "POST", "/v1/AUTH_test", tokens["owner"], sysmeta)[0] == 204
    assert raw(cluster, "GET", "/v1/AUTH_test", tokens["user3"])[0] == 403
    assert ACL.lower() not in raw(cluster, "HEAD", "/v1/AUTH_test", tokens["owner"])[1]


def test_read_only_grant_and_revocation(cluster, tokens, acct):
    u3 = tokens["user3"]
    obj = f"/v1/AUTH_test/{acct}/o"
    assert raw(cluster, "GET", "/v1/AUTH_test", u3)[0] == 403
    assert raw(cluster, "GET", obj, u3)[0] == 403
    assert raw(cluster, "POST", "/v1/AUTH_test", tokens["owner"],
               {"X-Account-Meta-Temp-Url-Key": "secret", "X-Account-Meta-Test": "v"})[0] == 204
    grant(cluster, tokens, "read-only")

    status, headers, body = raw(cluster, "GET", "/v1/AUTH_test", u3)
    assert status == 200 and acct in body.decode()
    assert headers["x-account-meta-test"] == "v"
    assert "x-account-meta-temp-url-key" not in headers and ACL.lower() not in headers
    status, headers, body = raw(cluster, "GET", f"/v1/AUTH_test/{acct}", u3)
    assert status == 200 and body == b"o\n"
    assert headers["x-container-meta-color"] == "red" and "x-container-read" not in headers
    assert raw(cluster, "GET", obj, u3)[2] == b"data"
    # ...and writes nothing.
    assert raw(cluster, "PUT", obj, u3, body=b"x")[0] == 403
    assert raw(cluster, "DELETE", obj, u3)[0] == 403
    assert raw(cluster, "PUT", "/v1/AUTH_test/new-by-ro", u3)[0] == 403
    assert raw(cluster, "POST", f"/v1/AUTH_test/{acct}", u3,
               {"X-Container-Meta-Color": "blue"})[0] == 403
    assert raw(cluster, "POST", "/v1/AUTH_test", u3, {"X-Account-Meta-Test": "w"})[0] == 403
    assert raw(cluster, "POST", "/v1/AUTH_test", u3, {ACL: "{}"})[0] == 403

    assert raw(cluster, "POST", "/v1/AUTH_test", tokens["owner"], {ACL: "{}"})[0] == 204
    assert raw(cluster, "GET", "/v1/AUTH_test", u3)[0] == 403
    assert raw(cluster, "GET", obj, u3)[0] == 403


def test_read_write_grant_and_revocation(cluster, tokens, acct):
    u3 = tokens["user3"]
    grant(cluster, tokens, "read-write")
    status, headers, _ = raw(cluster, "HEAD", "/v1/AUTH_test", u3)
    assert status == 204 and ACL.lower() not in headers
    # Containers and objects: yes.
    cont = f"/v1/AUTH_test/rw-{uuid.uuid4().hex[:8]}"
    assert raw(cluster, "PUT", cont, u3, {"X-Container-Read": "frank"})[0] == 201
    assert raw(cluster, "PUT", cont + "/o", u3, body=b"rw")[0] == 201
    assert raw(cluster, "GET", cont + "/o", tokens["owner"])[2] == b"rw"
    assert raw(cluster, "POST", f"/v1/AUTH_test/{acct}", u3,
               {"X-Container-Meta-Color": "blue", "X-Container-Read": "frank"})[0] == 204
    # ...but not the owner-only container ACLs it sent along.
    _, headers, _ = raw(cluster, "HEAD", cont, tokens["owner"])
    assert "x-container-read" not in headers
    _, headers, _ = raw(cluster, "HEAD", f"/v1/AUTH_test/{acct}", tokens["owner"])
    assert headers["x-container-meta-color"] == "blue" and headers["x-container-read"] == "jdoe"
    # An object PUT into a missing container is a 404 once allowed.
    assert raw(cluster, "PUT", "/v1/AUTH_test/missing-rw/o", u3, body=b"x")[0] == 404
    # The account itself: read only.
    assert raw(cluster, "POST", "/v1/AUTH_test", u3, {"X-Account-Meta-Test": "w"})[0] == 403
    assert raw(cluster, "DELETE", cont + "/o", u3)[0] == 204
    assert raw(cluster, "DELETE", cont, u3)[0] == 204

    assert raw(cluster, "POST", "/v1/AUTH_test", tokens["owner"], {ACL: "{}"})[0] == 204
    assert raw(cluster, "PUT", f"/v1/AUTH_test/{acct}/o2", u3, body=b"x")[0] == 403
    assert raw(cluster, "PUT", cont, u3)[0] == 403


def test_admin_grant_acts_as_owner_and_can_revoke_itself(cluster, tokens, acct):
    u3 = tokens["user3"]
    assert raw(cluster, "POST", "/v1/AUTH_test", tokens["owner"],
               {"X-Account-Meta-Temp-Url-Key": "secret"})[0] == 204
    value = grant(cluster, tokens, "admin")
    status, headers, _ = raw(cluster, "GET", "/v1/AUTH_test", u3)
    assert status == 200
    assert headers[ACL.lower()] == value.replace(" ", "")
    assert headers["x-account-meta-temp-url-key"] == "secret"
    assert raw(cluster, "POST", "/v1/AUTH_test", u3, {"X-Account-Meta-Test": "adm"})[0] == 204
    assert raw(cluster, "POST", f"/v1/AUTH_test/{acct}", u3,
               {"X-Container-Read": "frank"})[0] == 204
    _, headers, _ = raw(cluster, "HEAD", f"/v1/AUTH_test/{acct}", u3)
    assert headers["x-container-read"] == "frank"
    # Owning is not creating or deleting the account.
    assert raw(cluster, "DELETE", "/v1/AUTH_test", u3)[0] == 403
    # An admin may change the ACL, even to drop itself.
    assert raw(cluster, "POST", "/v1/AUTH_test", u3, {ACL: "{}"})[0] == 204
    assert raw(cluster, "GET", "/v1/AUTH_test", u3)[0] == 403


def test_grant_by_account_name_and_users_of_other_accounts(cluster, tokens, acct):
    other = tokens["other"]
    obj = f"/v1/AUTH_test/{acct}/o"
    assert raw(cluster, "GET", "/v1/AUTH_test", other)[0] == 403
    assert raw(cluster, "GET", obj, other)[0] == 403
    # A grant to someone else leaves test2:tester2 out.
    grant(cluster, tokens, "read-write")
    assert raw(cluster, "GET", obj, other)[0] == 403
    assert raw(cluster, "PUT", "/v1/AUTH_test/by-other", other)[0] == 403
    # A grant to the account name covers its users (the account is one of their groups).
    grant(cluster, tokens, "read-only", who="test2")
    assert raw(cluster, "GET", obj, other)[2] == b"data"
    assert raw(cluster, "PUT", obj, other, body=b"x")[0] == 403
    # Anonymous requests are never granted anything by an account ACL.
    assert raw(cluster, "GET", obj)[0] == 401


def test_service_token_for_service_accounts(cluster, tokens):
    own, svc = tokens["owner"], tokens["service"]
    cont = f"/v1/SERVICE_test/s-{uuid.uuid4().hex[:8]}"
    both = {"X-Service-Token": svc}
    # The account's admin alone, the service user alone, or as both tokens: no.
    for tok, extra in ((own, {}), (svc, {}), (svc, both)):
        assert raw(cluster, "HEAD", "/v1/SERVICE_test", tok, extra)[0] == 403
        assert raw(cluster, "PUT", cont, tok, extra)[0] == 403
    # A service token that does not validate adds nothing (and is not a 401).
    assert raw(cluster, "PUT", cont, own, {"X-Service-Token": svc[:-3] + "xyz"})[0] == 403
    # User plus service: owner of SERVICE_test.
    assert raw(cluster, "PUT", cont, own, both)[0] == 201
    assert raw(cluster, "PUT", cont + "/o", own, both, b"svc")[0] == 201
    assert raw(cluster, "GET", cont + "/o", own, both)[2] == b"svc"
    assert raw(cluster, "POST", "/v1/SERVICE_test", own,
               {**both, "X-Account-Meta-Kind": "service"})[0] == 204
    status, headers, _ = raw(cluster, "HEAD", "/v1/SERVICE_test", own, both)
    assert status == 204 and headers["x-account-meta-kind"] == "service"
    assert raw(cluster, "PUT", "/v1/SERVICE_test", own, both)[0] // 100 == 4
    assert raw(cluster, "GET", cont + "/o", own)[0] == 403
    # ...of that account only, and AUTH_ accounts need no service token.
    assert raw(cluster, "HEAD", "/v1/SERVICE_test2", own, both)[0] == 403
    assert raw(cluster, "HEAD", "/v1/AUTH_test", own)[0] == 204
    # A bad X-Auth-Token is 401 whatever the service token.
    assert raw(cluster, "HEAD", "/v1/SERVICE_test", own[:-3] + "xyz", both)[0] == 401
    assert raw(cluster, "DELETE", cont + "/o", own, both)[0] == 204
    assert raw(cluster, "DELETE", cont, own, both)[0] == 204


def test_accounts_outside_the_prefixes_and_reseller_rights(cluster, tokens, acct):
    admin = token(cluster, "admin:admin", "admin")
    for tok, want in ((None, 401), (tokens["owner"], 403), (admin, 403)):
        assert raw(cluster, "HEAD", "/v1/OTHER_test", tok)[0] == want
    assert raw(cluster, "HEAD", "/v1/AUTH_test", admin)[0] == 204
    assert raw(cluster, "HEAD", "/v1/AUTH_.hidden", admin)[0] == 403
    # A reseller reader reads every account, and writes nothing.
    reader = tokens["reader"]
    assert raw(cluster, "GET", "/v1/AUTH_test", reader)[0] == 200
    assert raw(cluster, "GET", f"/v1/AUTH_test/{acct}/o", reader)[2] == b"data"
    assert raw(cluster, "PUT", f"/v1/AUTH_test/{acct}/o", reader, body=b"x")[0] == 403
    assert raw(cluster, "POST", "/v1/AUTH_test", reader, {"X-Account-Meta-R": "x"})[0] == 403
    status, headers, _ = raw(cluster, "HEAD", f"/v1/AUTH_test/{acct}", reader)
    assert status == 204 and "x-container-read" not in headers


def test_copy_across_accounts_by_account_acl(cluster, tokens, acct):
    """A copy between accounts needs read access to the source and write access to the
    destination, either of which an account ACL may grant (as in Swift); a sub-request into
    the other account is judged on that account's ACL, never on the caller's own."""
    other = tokens["other"]  # test2:tester2, owner of AUTH_test2
    dst = f"dst-{uuid.uuid4().hex[:8]}"
    assert raw(cluster, "PUT", f"/v1/AUTH_test2/{dst}", other)[0] == 201
    pull = {"X-Copy-From": f"{acct}/o", "X-Copy-From-Account": "AUTH_test"}
    push = {"Destination": f"{acct}/pushed", "Destination-Account": "AUTH_test"}
    # No grant: neither direction.
    assert raw(cluster, "PUT", f"/v1/AUTH_test2/{dst}/pulled", other, pull, b"")[0] == 403
    assert raw(cluster, "PUT", f"/v1/AUTH_test2/{dst}/mine", other, body=b"mine")[0] == 201
    assert raw(cluster, "COPY", f"/v1/AUTH_test2/{dst}/mine", other, push)[0] == 403
    # Read-only on AUTH_test: pull from it, but still not push into it.
    grant(cluster, tokens, "read-only", "test2:tester2")
    status, headers, _ = raw(cluster, "PUT", f"/v1/AUTH_test2/{dst}/pulled", other, pull, b"")
    assert status == 201 and headers["x-copied-from-account"] == "AUTH_test"
    assert raw(cluster, "GET", f"/v1/AUTH_test2/{dst}/pulled", other)[2] == b"data"
    assert raw(cluster, "COPY", f"/v1/AUTH_test2/{dst}/mine", other, push)[0] == 403
    assert raw(cluster, "HEAD", f"/v1/AUTH_test/{acct}/pushed", tokens["owner"])[0] == 404
    # Read-write: push too.
    grant(cluster, tokens, "read-write", "test2:tester2")
    assert raw(cluster, "COPY", f"/v1/AUTH_test2/{dst}/mine", other, push)[0] == 201
    assert raw(cluster, "GET", f"/v1/AUTH_test/{acct}/pushed", tokens["owner"])[2] == b"mine"
