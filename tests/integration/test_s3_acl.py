"""S3 access control through boto3 and raw HTTP: the global bucket namespace, bucket and
object ACLs (canned, grant headers, documents), anonymous access, ownership controls, public
access block, and isolation between accounts: nothing reaches another account's bucket or
the reserved namespace unless its owner granted it, and refused input stores nothing."""

from __future__ import annotations

import threading

import boto3
import pytest
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.helpers import http_request
from tests.integration.s3_support import client, code_of, log_text

ALL_USERS = "http://acs.amazonaws.com/groups/global/AllUsers"


@pytest.fixture(scope="module")
def s3(cluster):
    return client(cluster)


@pytest.fixture(scope="module")
def alt(cluster):
    """Another account's admin (test2)."""
    return client(cluster, user="test2:tester2", key="testing2")


@pytest.fixture(scope="module")
def peer(cluster):
    """A non-admin user of the main user's own account (test)."""
    return client(cluster, user="test:tester3", key="testing3")


@pytest.fixture(scope="module")
def anon(cluster):
    return boto3.client("s3", endpoint_url=cluster.proxy_url, region_name="us-east-1",
                        config=Config(signature_version=UNSIGNED,
                                      s3={"addressing_style": "path"},
                                      retries={"max_attempts": 1}))


def refused(fn, *args, **kwargs) -> tuple[int, str]:
    with pytest.raises(ClientError) as exc:
        fn(*args, **kwargs)
    return code_of(exc)


def grants_of(resp) -> set[tuple[str, str]]:
    out = set()
    for g in resp["Grants"]:
        who = g["Grantee"].get("ID") or g["Grantee"].get("URI")
        out.add((who, g["Permission"]))
    return out


# ---- the global namespace --------------------------------------------------------------------

def test_bucket_names_are_global(s3, alt):
    s3.create_bucket(Bucket="taken")
    assert refused(alt.create_bucket, Bucket="taken") == (409, "BucketAlreadyExists")
    s3.create_bucket(Bucket="taken")  # one's own again: a success in us-east-1, nothing changed
    # The other account reaches the same bucket, and is refused there.
    assert refused(alt.head_bucket, Bucket="taken")[0] == 403
    assert refused(alt.list_objects, Bucket="taken") == (403, "AccessDenied")
    assert "taken" not in [b["Name"] for b in alt.list_buckets()["Buckets"]]
    # Deleted, the name is free for anyone.
    s3.delete_bucket(Bucket="taken")
    alt.create_bucket(Bucket="taken")
    assert refused(s3.create_bucket, Bucket="taken") == (409, "BucketAlreadyExists")
    s3_owner = s3.get_bucket_acl  # the main user is now the stranger
    assert refused(s3_owner, Bucket="taken") == (403, "AccessDenied")
    alt.delete_bucket(Bucket="taken")


def test_racing_creates_have_one_winner(cluster):
    users = [("test:tester", "testing"), ("test2:tester2", "testing2")] * 3
    outcomes: list[str] = []
    start = threading.Barrier(len(users))

    def create(user: str, key: str) -> None:
        c = client(cluster, user=user, key=key)
        start.wait()
        try:
            c.create_bucket(Bucket="contested")
            outcomes.append(user + " won")
        except ClientError as exc:
            outcomes.append(exc.response["Error"]["Code"])
    threads = [threading.Thread(target=create, args=u) for u in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [o for o in outcomes if o.endswith(" won")]
    assert len(winners) >= 1 and len({w.split(":")[0] for w in winners}) == 1, outcomes
    winner = winners[0].split(" ")[0]
    loser = "test2:tester2" if winner == "test:tester" else "test:tester"
    assert all(o in ("BucketAlreadyExists", "BucketAlreadyOwnedByYou") or o.endswith(" won")
               for o in outcomes), outcomes
    key = {"test:tester": "testing", "test2:tester2": "testing2"}
    owner = client(cluster, user=winner, key=key[winner])
    other = client(cluster, user=loser, key=key[loser])
    owner.put_object(Bucket="contested", Key="k", Body=b"mine")
    assert refused(other.get_object, Bucket="contested", Key="k") == (403, "AccessDenied")
    assert owner.get_bucket_acl(Bucket="contested")["Owner"]["ID"] == winner
    owner.delete_object(Bucket="contested", Key="k")
    owner.delete_bucket(Bucket="contested")


# ---- isolation ------------------------------------------------------------------------------

def test_private_bucket_is_closed_to_others(s3, alt, peer, anon):
    s3.create_bucket(Bucket="closed")
    s3.put_object(Bucket="closed", Key="secret", Body=b"mine")
    for other in (alt, peer, anon):
        assert refused(other.get_object, Bucket="closed", Key="secret") == \
            (403, "AccessDenied")
        assert refused(other.head_object, Bucket="closed", Key="secret")[0] == 403
        assert refused(other.list_objects, Bucket="closed") == (403, "AccessDenied")
        assert refused(other.list_objects_v2, Bucket="closed") == (403, "AccessDenied")
        assert refused(other.put_object, Bucket="closed", Key="secret",
                       Body=b"theirs") == (403, "AccessDenied")
        assert refused(other.put_object, Bucket="closed", Key="new",
                       Body=b"theirs") == (403, "AccessDenied")
        assert refused(other.delete_object, Bucket="closed", Key="secret") == \
            (403, "AccessDenied")
        assert refused(other.get_bucket_acl, Bucket="closed") == (403, "AccessDenied")
        assert refused(other.get_object_acl, Bucket="closed", Key="secret") == \
            (403, "AccessDenied")
        assert refused(other.put_bucket_acl, Bucket="closed", ACL="public-read") == \
            (403, "AccessDenied")
        assert refused(other.delete_bucket, Bucket="closed") == (403, "AccessDenied")
        assert refused(other.copy_object, Bucket="closed", Key="copy",
                       CopySource={"Bucket": "closed", "Key": "secret"}) == \
            (403, "AccessDenied")
        assert refused(other.create_multipart_upload, Bucket="closed", Key="mp") == \
            (403, "AccessDenied")
        assert refused(other.list_multipart_uploads, Bucket="closed") == \
            (403, "AccessDenied")
    # Nothing they tried changed anything.
    assert s3.get_object(Bucket="closed", Key="secret")["Body"].read() == b"mine"
    assert [c["Key"] for c in s3.list_objects(Bucket="closed")["Contents"]] == ["secret"]
    assert grants_of(s3.get_bucket_acl(Bucket="closed")) == {("test:tester", "FULL_CONTROL")}


def test_copy_out_of_a_private_bucket_is_refused(s3, alt):
    s3.create_bucket(Bucket="copysrc")
    s3.put_object(Bucket="copysrc", Key="secret", Body=b"mine")
    alt.create_bucket(Bucket="copydst")
    assert refused(alt.copy_object, Bucket="copydst", Key="stolen",
                   CopySource={"Bucket": "copysrc", "Key": "secret"}) == \
        (403, "AccessDenied")
    upload = alt.create_multipart_upload(Bucket="copydst", Key="parts")["UploadId"]
    assert refused(alt.upload_part_copy, Bucket="copydst", Key="parts", UploadId=upload,
                   PartNumber=1, CopySource={"Bucket": "copysrc", "Key": "secret"}) == \
        (403, "AccessDenied")
    assert alt.list_parts(Bucket="copydst", Key="parts", UploadId=upload).get("Parts") is None
    alt.abort_multipart_upload(Bucket="copydst", Key="parts", UploadId=upload)
    assert "Contents" not in alt.list_objects(Bucket="copydst")
    # Granted read, the copy across accounts works.
    s3.put_object_acl(Bucket="copysrc", Key="secret", GrantRead="id=test2:tester2")
    alt.copy_object(Bucket="copydst", Key="copied",
                    CopySource={"Bucket": "copysrc", "Key": "secret"})
    assert alt.get_object(Bucket="copydst", Key="copied")["Body"].read() == b"mine"


def test_a_grant_does_not_leak(s3, alt, peer, anon, cluster):
    s3.create_bucket(Bucket="granted")
    s3.put_object(Bucket="granted", Key="doc", Body=b"for test2")
    s3.put_object_acl(Bucket="granted", Key="doc", GrantRead="id=test2:tester2")
    assert alt.get_object(Bucket="granted", Key="doc")["Body"].read() == b"for test2"
    # READ on the object is not READ on the bucket, nor any write, nor its ACL.
    assert refused(alt.list_objects, Bucket="granted") == (403, "AccessDenied")
    assert refused(alt.put_object, Bucket="granted", Key="doc", Body=b"x") == \
        (403, "AccessDenied")
    assert refused(alt.get_object_acl, Bucket="granted", Key="doc") == (403, "AccessDenied")
    # Nobody else gains anything from it.
    for other in (peer, anon):
        assert refused(other.get_object, Bucket="granted", Key="doc") == \
            (403, "AccessDenied")
    # A bucket grant of WRITE lets test2 add objects, which then are test2's.
    s3.put_bucket_acl(Bucket="granted", GrantWrite="id=test2:tester2",
                      GrantFullControl="id=test:tester")
    alt.put_object(Bucket="granted", Key="theirs", Body=b"x")
    assert refused(peer.put_object, Bucket="granted", Key="peer", Body=b"x")[0] == 403
    acl = alt.get_object_acl(Bucket="granted", Key="theirs")
    assert acl["Owner"]["ID"] == "test2:tester2"
    # Its ACL is test2's: the bucket's owner reads it only where test2 grants it.
    assert refused(s3.get_object_acl, Bucket="granted", Key="theirs") == (403, "AccessDenied")
    assert refused(alt.list_objects, Bucket="granted") == (403, "AccessDenied")


def test_anonymous_access_follows_acls(s3, anon, cluster):
    s3.create_bucket(Bucket="public", ACL="public-read")
    s3.put_object(Bucket="public", Key="open", Body=b"everyone", ACL="public-read")
    s3.put_object(Bucket="public", Key="shut", Body=b"owner")
    assert anon.get_object(Bucket="public", Key="open")["Body"].read() == b"everyone"
    assert sorted(c["Key"] for c in anon.list_objects(Bucket="public")["Contents"]) == \
        ["open", "shut"]
    assert refused(anon.get_object, Bucket="public", Key="shut") == (403, "AccessDenied")
    assert refused(anon.put_object, Bucket="public", Key="new", Body=b"x") == \
        (403, "AccessDenied")
    assert refused(anon.get_object, Bucket="public", Key="missing") == (404, "NoSuchKey")
    assert refused(anon.get_object, Bucket="nobody-has-this", Key="k") == \
        (404, "NoSuchBucket")
    # A raw anonymous GET is S3's. Swift's URLs stay closed: Swift's container ACL has no
    # "list but read nothing", and `.r:*` would open the bucket's private objects too.
    status, _, body = http_request(cluster.proxy_url, "GET", "/public/open")
    assert (status, body) == (200, b"everyone")
    for key in ("open", "shut"):
        status, _, body = http_request(cluster.proxy_url, "GET", f"/v1/AUTH_test/public/{key}")
        assert status == 401 and body != b"owner"
    assert anon.list_buckets()["Buckets"] == []
    # Back to private: closed again to both APIs.
    s3.put_bucket_acl(Bucket="public", ACL="private")
    assert refused(anon.list_objects, Bucket="public") == (403, "AccessDenied")
    status, _, _ = http_request(cluster.proxy_url, "GET", "/v1/AUTH_test/public/shut")
    assert status == 401


def test_public_read_write_bucket(s3, alt, anon):
    s3.create_bucket(Bucket="dropbox", ACL="public-read-write")
    anon.put_object(Bucket="dropbox", Key="anon", Body=b"a")
    alt.put_object(Bucket="dropbox", Key="alt", Body=b"b")
    # Each object is its writer's, private: the other writer cannot read it.
    assert refused(alt.get_object, Bucket="dropbox", Key="anon")[0] == 403
    assert s3.get_object(Bucket="dropbox", Key="alt")["Body"].read() == b"b"
    assert alt.get_object_acl(Bucket="dropbox", Key="alt")["Owner"]["ID"] == "test2:tester2"
    assert refused(s3.get_object_acl, Bucket="dropbox", Key="alt")[0] == 403


def test_reserved_namespace_is_unreachable(s3, cluster):
    s3.create_bucket(Bucket="withmpu")
    s3.create_multipart_upload(Bucket="withmpu", Key="big")
    paths = ("/%00mpu%00withmpu", "/%00mpu%00withmpu/", "/%00mpu%00withmpu/%00big",
             "/%00s3%00buckets/withmpu", "/.s3/withmpu", "/%00s3acl%00withmpu", "/%00")
    for path in paths:
        # Neither anonymous nor as the bucket's owner.
        for status, _, body in (http_request(cluster.proxy_url, "GET", path),
                                _raw(cluster, "GET", path)):
            assert 400 <= status < 500, (path, status, body)
            # The upload's marker is never listed (an error may echo the path it was sent).
            assert b"<Contents>" not in body and b"<Key>" not in body
    # Through Swift, the registry's account is no one's, not even a reseller admin's.
    conn = cluster.connection("admin:admin", "admin")
    _, token = conn.get_auth()
    for path in ("/v1/AUTH_.s3", "/v1/AUTH_.s3/%00s3%00buckets"):
        status, _, _ = http_request(cluster.proxy_url, "GET", path, {"X-Auth-Token": token})
        assert status in (403, 412), (path, status)


# ---- ACL operations --------------------------------------------------------------------------

def test_canned_and_granted_acls(s3):
    s3.create_bucket(Bucket="acled", ACL="authenticated-read")
    assert grants_of(s3.get_bucket_acl(Bucket="acled")) == {
        ("http://acs.amazonaws.com/groups/global/AuthenticatedUsers", "READ"),
        ("test:tester", "FULL_CONTROL")}
    s3.put_bucket_acl(Bucket="acled", GrantRead=f'uri="{ALL_USERS}"',
                      GrantWriteACP="emailAddress=tester2@example.com",
                      GrantFullControl="id=test:tester")
    assert grants_of(s3.get_bucket_acl(Bucket="acled")) == {
        (ALL_USERS, "READ"), ("test2:tester2", "WRITE_ACP"), ("test:tester", "FULL_CONTROL")}
    s3.put_object(Bucket="acled", Key="o", Body=b"x", ACL="bucket-owner-full-control")
    assert grants_of(s3.get_object_acl(Bucket="acled", Key="o")) == {
        ("test:tester", "FULL_CONTROL")}
    policy = s3.get_bucket_acl(Bucket="acled")
    s3.put_bucket_acl(Bucket="acled", AccessControlPolicy={
        "Owner": policy["Owner"], "Grants": [
            {"Grantee": {"Type": "CanonicalUser", "ID": "test:tester"},
             "Permission": "FULL_CONTROL"}]})
    assert grants_of(s3.get_bucket_acl(Bucket="acled")) == {("test:tester", "FULL_CONTROL")}


def test_versions_keep_their_own_acls(s3, alt):
    s3.create_bucket(Bucket="versioned-acl")
    s3.put_bucket_versioning(Bucket="versioned-acl",
                             VersioningConfiguration={"Status": "Enabled"})
    v1 = s3.put_object(Bucket="versioned-acl", Key="k", Body=b"one")["VersionId"]
    v2 = s3.put_object(Bucket="versioned-acl", Key="k", Body=b"two")["VersionId"]
    s3.put_object_acl(Bucket="versioned-acl", Key="k", VersionId=v1, ACL="public-read")
    assert (ALL_USERS, "READ") in grants_of(
        s3.get_object_acl(Bucket="versioned-acl", Key="k", VersionId=v1))
    assert (ALL_USERS, "READ") not in grants_of(
        s3.get_object_acl(Bucket="versioned-acl", Key="k", VersionId=v2))
    assert alt.get_object(Bucket="versioned-acl", Key="k", VersionId=v1)["Body"].read() == \
        b"one"
    assert refused(alt.get_object, Bucket="versioned-acl", Key="k")[0] == 403
    # The ACL change did not touch the object (its date, its listing).
    listing = s3.list_object_versions(Bucket="versioned-acl")["Versions"]
    assert len(listing) == 2


def test_refused_acl_input_stores_nothing(s3, cluster):
    # A bad canned ACL on create: no bucket, and the name stays free.
    assert refused(s3.create_bucket, Bucket="never", ACL="world-writable") == \
        (400, "InvalidArgument")
    assert refused(s3.head_bucket, Bucket="never")[0] == 404
    s3.create_bucket(Bucket="kept")
    before = s3.get_bucket_acl(Bucket="kept")["Grants"]
    bad_grants = [
        ({"GrantRead": "id=nobody:here"}, (400, "InvalidArgument")),
        ({"GrantRead": "emailAddress=ghost@example.invalid"},
         (400, "UnresolvableGrantByEmailAddress")),
        ({"GrantRead": 'uri="http://example.com/group"'}, (400, "InvalidArgument")),
        ({"GrantRead": "bogus"}, (400, "InvalidArgument")),
        ({"ACL": "public-read", "GrantRead": "id=test:tester"}, (400, "InvalidRequest")),
    ]
    for kwargs, want in bad_grants:
        assert refused(s3.put_bucket_acl, Bucket="kept", **kwargs) == want, kwargs
    for body in (b"<AccessControlPolicy><AccessControlList><Grant><Grantee/>"
                 b"<Permission>READ</Permission></Grant></AccessControlList>"
                 b"</AccessControlPolicy>", b"<nope/>", b"<AccessControlPolicy>",
                 b"<!DOCTYPE x [<!ENTITY e 'x'>]><AccessControlPolicy/>"):
        status, _, answer = _raw(cluster, "PUT", "/kept?acl", body)
        assert status == 400 and b"MalformedXML" in answer, (body, answer)
    assert s3.get_bucket_acl(Bucket="kept")["Grants"] == before
    # An object with a bad ACL is not stored.
    assert refused(s3.put_object, Bucket="kept", Key="o", Body=b"x",
                   GrantRead="id=nobody:here") == (400, "InvalidArgument")
    assert "Contents" not in s3.list_objects(Bucket="kept")


def _raw(cluster, method: str, path: str, body: bytes = b""):
    """A raw request signed (SigV4) as the main user, path as given."""
    import hashlib

    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    req = AWSRequest(method=method, url=cluster.proxy_url + path, data=body,
                     headers={"x-amz-content-sha256": hashlib.sha256(body).hexdigest()})
    SigV4Auth(Credentials("test:tester", "testing"), "s3", "us-east-1").add_auth(req)
    return http_request(cluster.proxy_url, method, path, dict(req.headers.items()), body)


def test_ownership_controls_and_public_access_block(s3, alt):
    s3.create_bucket(Bucket="enforced", ObjectOwnership="BucketOwnerEnforced")
    rules = s3.get_bucket_ownership_controls(Bucket="enforced")["OwnershipControls"]["Rules"]
    assert rules == [{"ObjectOwnership": "BucketOwnerEnforced"}]
    # ACLs are off: a public one is refused, and grants give nothing.
    assert refused(s3.put_bucket_acl, Bucket="enforced", ACL="public-read")[0] == 400
    s3.delete_bucket_ownership_controls(Bucket="enforced")
    assert refused(s3.get_bucket_ownership_controls, Bucket="enforced") == \
        (404, "OwnershipControlsNotFoundError")
    # Bad input stores nothing.
    assert refused(s3.put_bucket_ownership_controls, Bucket="enforced",
                   OwnershipControls={"Rules": [{"ObjectOwnership": "Nobody"}]})[0] == 400
    assert refused(s3.get_bucket_ownership_controls, Bucket="enforced")[0] == 404
    s3.put_public_access_block(Bucket="enforced", PublicAccessBlockConfiguration={
        "BlockPublicAcls": True, "IgnorePublicAcls": True})
    got = s3.get_public_access_block(Bucket="enforced")["PublicAccessBlockConfiguration"]
    assert got == {"BlockPublicAcls": True, "IgnorePublicAcls": True,
                   "BlockPublicPolicy": False, "RestrictPublicBuckets": False}
    assert refused(s3.put_bucket_acl, Bucket="enforced", ACL="public-read")[0] == 403
    assert refused(s3.put_object, Bucket="enforced", Key="o", Body=b"",
                   ACL="public-read")[0] == 403
    assert refused(alt.get_public_access_block, Bucket="enforced")[0] == 403
    s3.delete_public_access_block(Bucket="enforced")
    assert refused(s3.get_public_access_block, Bucket="enforced") == \
        (404, "NoSuchPublicAccessBlockConfiguration")


def test_expected_bucket_owner(s3):
    s3.create_bucket(Bucket="expected")
    s3.list_objects(Bucket="expected", ExpectedBucketOwner="test:tester")
    assert refused(s3.list_objects, Bucket="expected",
                   ExpectedBucketOwner="test2:tester2") == (403, "AccessDenied")
    assert refused(s3.put_object, Bucket="expected", Key="o", Body=b"x",
                   ExpectedBucketOwner="someone") == (403, "AccessDenied")
    assert "Contents" not in s3.list_objects(Bucket="expected")


def test_no_tracebacks(cluster):
    assert "Traceback" not in log_text(cluster)
