"""S3 object lock through boto3 and Swift: a version under COMPLIANCE retention or a legal
hold cannot be deleted by its owner, by S3 (with or without the governance bypass) nor by
Swift; GOVERNANCE yields to the bypass only; lock configurations and retentions are
checked, and a refused one stores nothing."""

from __future__ import annotations

import datetime

import pytest
from botocore.exceptions import ClientError
from swiftclient import ClientException

from tests.integration.s3_support import client, code_of

FAR = datetime.datetime(2100, 1, 1, tzinfo=datetime.UTC)
NEAR = datetime.datetime(2099, 1, 1, tzinfo=datetime.UTC)


@pytest.fixture(scope="module")
def s3(cluster):
    return client(cluster)


def versions(s3, bucket: str) -> list[str]:
    listing = s3.list_object_versions(Bucket=bucket)
    return [v["VersionId"] for v in listing.get("Versions", [])]


def test_compliance_version_outlives_owner_s3_and_swift(s3, cluster):
    s3.create_bucket(Bucket="vault", ObjectLockEnabledForBucket=True)
    assert s3.get_bucket_versioning(Bucket="vault")["Status"] == "Enabled"
    vid = s3.put_object(Bucket="vault", Key="deed", Body=b"mine", ObjectLockMode="COMPLIANCE",
                        ObjectLockRetainUntilDate=FAR)["VersionId"]
    head = s3.head_object(Bucket="vault", Key="deed")
    assert head["ObjectLockMode"] == "COMPLIANCE" and head["ObjectLockRetainUntilDate"] == FAR
    for bypass in (False, True):
        with pytest.raises(ClientError) as exc:
            s3.delete_object(Bucket="vault", Key="deed", VersionId=vid,
                             BypassGovernanceRetention=bypass)
        assert code_of(exc) == (403, "AccessDenied")
    # COMPLIANCE neither shortens nor turns into GOVERNANCE, even with the bypass.
    for mode, until in (("COMPLIANCE", NEAR), ("GOVERNANCE", FAR)):
        with pytest.raises(ClientError) as exc:
            s3.put_object_retention(Bucket="vault", Key="deed", VersionId=vid,
                                    Retention={"Mode": mode, "RetainUntilDate": until},
                                    BypassGovernanceRetention=True)
        assert code_of(exc) == (403, "AccessDenied")
    # Without a version id: a delete marker, the version stays.
    s3.delete_object(Bucket="vault", Key="deed")
    assert len(s3.list_object_versions(Bucket="vault")["DeleteMarkers"]) == 1
    assert versions(s3, "vault") == [vid]
    res = s3.delete_objects(Bucket="vault", BypassGovernanceRetention=True,
                            Delete={"Objects": [{"Key": "deed", "VersionId": vid}]})
    assert [e["Code"] for e in res["Errors"]] == ["AccessDenied"]
    # Swift: the same owner cannot delete the version, nor turn versioning off.
    conn = cluster.connection()
    with pytest.raises(ClientException) as swift_exc:
        conn.delete_object("vault", "deed", query_string=f"version-id={vid}")
    assert swift_exc.value.http_status == 403
    with pytest.raises(ClientException) as swift_exc:
        conn.post_container("vault", {"X-Versions-Enabled": "false"})
    assert swift_exc.value.http_status == 409
    # Nor reach the hidden versions container (the reserved namespace) to delete it.
    hidden = "\x00versions\x00vault"
    names = [row["name"] for row in conn.get_account(prefix="\x00")[1]]
    assert hidden not in names
    for call in (lambda: conn.delete_container(hidden),
                 lambda: conn.get_container(hidden),
                 lambda: conn.delete_object(hidden, "\x00deed\x00x")):
        with pytest.raises(ClientException) as swift_exc:
            call()
        assert swift_exc.value.http_status in (400, 403, 404, 412)
    with pytest.raises(ClientError) as exc:
        s3.put_bucket_versioning(Bucket="vault", VersioningConfiguration={"Status":
                                                                          "Suspended"})
    assert code_of(exc) == (409, "InvalidBucketState")
    assert s3.get_object(Bucket="vault", Key="deed", VersionId=vid)["Body"].read() == b"mine"
    with pytest.raises(ClientError) as exc:
        s3.delete_bucket(Bucket="vault")
    assert code_of(exc)[0] == 409


def test_governance_yields_to_bypass_only(s3, cluster):
    s3.create_bucket(Bucket="gov", ObjectLockEnabledForBucket=True)
    vid = s3.put_object(Bucket="gov", Key="k", Body=b"x", Metadata={"color": "blue"})[
        "VersionId"]
    s3.put_object_retention(Bucket="gov", Key="k",
                            Retention={"Mode": "GOVERNANCE", "RetainUntilDate": NEAR})
    s3.put_object_retention(Bucket="gov", Key="k",
                            Retention={"Mode": "GOVERNANCE", "RetainUntilDate": FAR})
    got = s3.get_object_retention(Bucket="gov", Key="k", VersionId=vid)["Retention"]
    assert got == {"Mode": "GOVERNANCE", "RetainUntilDate": FAR}
    # Setting a retention keeps the object's metadata.
    assert s3.head_object(Bucket="gov", Key="k")["Metadata"] == {"color": "blue"}
    with pytest.raises(ClientError) as exc:
        s3.put_object_retention(Bucket="gov", Key="k",
                                Retention={"Mode": "GOVERNANCE", "RetainUntilDate": NEAR})
    assert code_of(exc) == (403, "AccessDenied")
    with pytest.raises(ClientError) as exc:
        s3.delete_object(Bucket="gov", Key="k", VersionId=vid)
    assert code_of(exc) == (403, "AccessDenied")
    # A user who may write the bucket but does not own the account cannot bypass.
    cluster.connection().post_container("gov", {"X-Container-Write": "test:tester3",
                                                "X-Container-Read": "test:tester3"})
    other = client(cluster, "test:tester3", "testing3")
    with pytest.raises(ClientError) as exc:
        other.put_object_retention(Bucket="gov", Key="k", BypassGovernanceRetention=True,
                                   Retention={"Mode": "GOVERNANCE", "RetainUntilDate": NEAR})
    assert code_of(exc) == (403, "AccessDenied")
    with pytest.raises(ClientError) as exc:
        other.delete_object(Bucket="gov", Key="k", VersionId=vid,
                            BypassGovernanceRetention=True)
    assert code_of(exc) == (403, "AccessDenied")
    assert s3.get_object_retention(Bucket="gov", Key="k")["Retention"]["RetainUntilDate"] == FAR
    assert versions(s3, "gov") == [vid]
    s3.delete_object(Bucket="gov", Key="k", VersionId=vid, BypassGovernanceRetention=True)
    assert versions(s3, "gov") == []


def test_legal_hold_blocks_deletion_until_lifted(s3, cluster):
    s3.create_bucket(Bucket="held", ObjectLockEnabledForBucket=True)
    old = s3.put_object(Bucket="held", Key="k", Body=b"1")["VersionId"]
    new = s3.put_object(Bucket="held", Key="k", Body=b"2")["VersionId"]
    s3.put_object_legal_hold(Bucket="held", Key="k", VersionId=old, LegalHold={"Status": "ON"})
    assert s3.get_object_legal_hold(Bucket="held", Key="k", VersionId=old)["LegalHold"] == \
        {"Status": "ON"}
    assert s3.head_object(Bucket="held", Key="k", VersionId=old)[
        "ObjectLockLegalHoldStatus"] == "ON"
    assert "ObjectLockLegalHoldStatus" not in s3.head_object(Bucket="held", Key="k")
    with pytest.raises(ClientError) as exc:
        s3.delete_object(Bucket="held", Key="k", VersionId=old, BypassGovernanceRetention=True)
    assert code_of(exc) == (403, "AccessDenied")
    with pytest.raises(ClientException) as swift_exc:
        cluster.connection().delete_object("held", "k", query_string=f"version-id={old}")
    assert swift_exc.value.http_status == 403
    s3.delete_object(Bucket="held", Key="k", VersionId=new)  # not held
    s3.put_object_legal_hold(Bucket="held", Key="k", VersionId=old,
                             LegalHold={"Status": "OFF"})
    s3.delete_object(Bucket="held", Key="k", VersionId=old)
    assert versions(s3, "held") == []


def test_configuration_default_retention_and_refusals(s3):
    s3.create_bucket(Bucket="conf", ObjectLockEnabledForBucket=True)
    assert s3.get_object_lock_configuration(Bucket="conf")["ObjectLockConfiguration"] == \
        {"ObjectLockEnabled": "Enabled"}
    conf = {"ObjectLockEnabled": "Enabled",
            "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}}}
    s3.put_object_lock_configuration(Bucket="conf", ObjectLockConfiguration=conf)
    assert s3.get_object_lock_configuration(Bucket="conf")["ObjectLockConfiguration"] == conf
    bad = [({"Mode": "governance", "Days": 1}, (400, "MalformedXML")),
           ({"Mode": "GOVERNANCE", "Days": 1, "Years": 1}, (400, "MalformedXML")),
           ({"Mode": "GOVERNANCE", "Days": 0}, (400, "InvalidRetentionPeriod")),
           ({"Mode": "COMPLIANCE", "Years": -1}, (400, "InvalidRetentionPeriod"))]
    for retention, expected in bad:
        with pytest.raises(ClientError) as exc:
            s3.put_object_lock_configuration(Bucket="conf", ObjectLockConfiguration={
                "ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": retention}})
        assert code_of(exc) == expected
    assert s3.get_object_lock_configuration(Bucket="conf")["ObjectLockConfiguration"] == conf
    s3.put_object(Bucket="conf", Key="k", Body=b"x")
    head = s3.head_object(Bucket="conf", Key="k")
    assert head["ObjectLockMode"] == "GOVERNANCE"
    left = head["ObjectLockRetainUntilDate"] - datetime.datetime.now(datetime.UTC)
    assert datetime.timedelta(hours=23) < left <= datetime.timedelta(days=1)
    with pytest.raises(ClientError) as exc:
        s3.put_object_retention(Bucket="conf", Key="k",
                                Retention={"Mode": "governance", "RetainUntilDate": FAR})
    assert code_of(exc) == (400, "MalformedXML")
    with pytest.raises(ClientError) as exc:
        s3.put_object_legal_hold(Bucket="conf", Key="k", LegalHold={"Status": "abc"})
    assert code_of(exc) == (400, "MalformedXML")
    assert s3.head_object(Bucket="conf", Key="k")["ObjectLockMode"] == "GOVERNANCE"
    with pytest.raises(ClientError) as exc:
        s3.put_object(Bucket="conf", Key="bad", Body=b"x", ObjectLockMode="GOVERNANCE")
    assert code_of(exc) == (400, "InvalidArgument")
    with pytest.raises(ClientError) as exc:
        s3.head_object(Bucket="conf", Key="bad")
    assert code_of(exc)[0] == 404


def test_buckets_without_lock(s3):
    s3.create_bucket(Bucket="plain")
    s3.put_object(Bucket="plain", Key="k", Body=b"x")
    conf = {"ObjectLockEnabled": "Enabled",
            "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}}}
    with pytest.raises(ClientError) as exc:
        s3.put_object_lock_configuration(Bucket="plain", ObjectLockConfiguration=conf)
    assert code_of(exc) == (409, "InvalidBucketState")
    with pytest.raises(ClientError) as exc:
        s3.get_object_lock_configuration(Bucket="plain")
    assert code_of(exc) == (404, "ObjectLockConfigurationNotFoundError")
    for call, kwargs in ((s3.put_object_retention, {"Retention": {
            "Mode": "GOVERNANCE", "RetainUntilDate": FAR}}),
            (s3.get_object_retention, {}),
            (s3.put_object_legal_hold, {"LegalHold": {"Status": "ON"}}),
            (s3.get_object_legal_hold, {})):
        with pytest.raises(ClientError) as exc:
            call(Bucket="plain", Key="k", **kwargs)
        assert code_of(exc) == (400, "InvalidRequest")
    with pytest.raises(ClientError) as exc:
        s3.put_object(Bucket="plain", Key="locked", Body=b"x", ObjectLockLegalHoldStatus="ON")
    assert code_of(exc) == (400, "InvalidRequest")
    with pytest.raises(ClientError) as exc:
        s3.head_object(Bucket="plain", Key="locked")
    assert code_of(exc)[0] == 404
    # Versioned later, the bucket may take a lock configuration.
    s3.put_bucket_versioning(Bucket="plain", VersioningConfiguration={"Status": "Enabled"})
    s3.put_object_lock_configuration(Bucket="plain", ObjectLockConfiguration=conf)
    assert s3.get_object_lock_configuration(Bucket="plain")["ObjectLockConfiguration"] == conf


def test_multipart_object_carries_the_lock(s3):
    s3.create_bucket(Bucket="mpulock", ObjectLockEnabledForBucket=True)
    up = s3.create_multipart_upload(Bucket="mpulock", Key="big", ObjectLockLegalHoldStatus="ON",
                                    ObjectLockMode="COMPLIANCE",
                                    ObjectLockRetainUntilDate=FAR)["UploadId"]
    etag = s3.upload_part(Bucket="mpulock", Key="big", UploadId=up, PartNumber=1,
                          Body=b"abc")["ETag"]
    done = s3.complete_multipart_upload(Bucket="mpulock", Key="big", UploadId=up,
                                        MultipartUpload={"Parts": [{"ETag": etag,
                                                                    "PartNumber": 1}]})
    vid = done["VersionId"]
    head = s3.head_object(Bucket="mpulock", Key="big", VersionId=vid)
    assert head["ObjectLockLegalHoldStatus"] == "ON" and head["ObjectLockMode"] == "COMPLIANCE"
    s3.put_object_legal_hold(Bucket="mpulock", Key="big", LegalHold={"Status": "OFF"})
    with pytest.raises(ClientError) as exc:
        s3.delete_object(Bucket="mpulock", Key="big", VersionId=vid)
    assert code_of(exc) == (403, "AccessDenied")
    assert s3.get_object(Bucket="mpulock", Key="big")["Body"].read() == b"abc"
