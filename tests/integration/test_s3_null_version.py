"""S3's `null` version through boto3: an object written before versioning was enabled stays
`versionId=null` after a versioned overwrite kept it as a version (ListObjectVersions, GET,
DELETE by `null`), while Swift's own listings show its timestamp id, as Swift does."""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError

from tests.integration.s3_support import client, code_of, log_text


@pytest.fixture(scope="module")
def s3(cluster):
    return client(cluster)


@pytest.fixture(scope="module")
def alt(cluster):
    return client(cluster, user="test2:tester2", key="testing2")


def versions_of(s3, bucket: str) -> list[tuple[str, str, bool]]:
    got = s3.list_object_versions(Bucket=bucket)
    return [(v["Key"], v["VersionId"], v["IsLatest"]) for v in got.get("Versions", [])]


def test_null_version_survives_a_versioned_overwrite(s3):
    s3.create_bucket(Bucket="nullv")
    s3.put_object(Bucket="nullv", Key="k", Body=b"before")
    s3.put_bucket_versioning(Bucket="nullv", VersioningConfiguration={"Status": "Enabled"})
    vid = s3.put_object(Bucket="nullv", Key="k", Body=b"after")["VersionId"]
    assert vid != "null"
    assert versions_of(s3, "nullv") == [("k", vid, True), ("k", "null", False)]
    got = s3.get_object(Bucket="nullv", Key="k", VersionId="null")
    assert got["Body"].read() == b"before"
    assert got["VersionId"] == "null"
    assert s3.head_object(Bucket="nullv", Key="k", VersionId="null")["ContentLength"] == 6
    # The newest goes: the null version is current again, and then goes by its name.
    s3.delete_object(Bucket="nullv", Key="k", VersionId=vid)
    assert s3.get_object(Bucket="nullv", Key="k")["Body"].read() == b"before"
    resp = s3.delete_object(Bucket="nullv", Key="k", VersionId="null")
    assert resp["VersionId"] == "null"
    assert code_of(pytest.raises(ClientError, s3.get_object, Bucket="nullv", Key="k")) == \
        (404, "NoSuchKey")
    assert versions_of(s3, "nullv") == []


def test_null_names_only_the_version_that_was_null(s3):
    s3.create_bucket(Bucket="nullv-none")
    s3.put_bucket_versioning(Bucket="nullv-none",
                             VersioningConfiguration={"Status": "Enabled"})
    s3.put_object(Bucket="nullv-none", Key="k", Body=b"one")
    s3.put_object(Bucket="nullv-none", Key="k", Body=b"two")
    # Never written unversioned: there is no null version to find.
    with pytest.raises(ClientError) as exc:
        s3.get_object(Bucket="nullv-none", Key="k", VersionId="null")
    assert code_of(exc)[0] == 404
    s3.delete_object(Bucket="nullv-none", Key="k", VersionId="null")  # nothing to delete
    assert [v[1] != "null" for v in versions_of(s3, "nullv-none")] == [True, True]


def test_null_version_is_judged_as_itself(s3, alt):
    """A grantee of the bucket learns nothing of a private null version by naming it."""
    s3.create_bucket(Bucket="nullv-acl", GrantRead='id="test2:tester2"',
                     GrantFullControl='id="test:tester"')
    s3.put_object(Bucket="nullv-acl", Key="k", Body=b"private")
    s3.put_bucket_versioning(Bucket="nullv-acl",
                             VersioningConfiguration={"Status": "Enabled"})
    s3.put_object(Bucket="nullv-acl", Key="k", Body=b"newer")
    for call in (alt.get_object, alt.head_object, alt.get_object_acl):
        with pytest.raises(ClientError) as exc:
            call(Bucket="nullv-acl", Key="k", VersionId="null")
        assert code_of(exc)[0] == 403


def test_swift_listing_shows_the_timestamp_id(cluster, s3):
    s3.create_bucket(Bucket="nullv-swift")
    s3.put_object(Bucket="nullv-swift", Key="k", Body=b"before")
    s3.put_bucket_versioning(Bucket="nullv-swift",
                             VersioningConfiguration={"Status": "Enabled"})
    vid = s3.put_object(Bucket="nullv-swift", Key="k", Body=b"after")["VersionId"]
    conn = cluster.connection("test:tester", "testing")
    _, rows = conn.get_container("nullv-swift", query_string="versions&format=json")
    assert [r["version_id"] for r in rows][0] == vid
    assert "null" not in [r["version_id"] for r in rows]
    assert all("was_null" not in r for r in rows), json.dumps(rows)


def test_no_tracebacks(cluster):
    assert "Traceback" not in log_text(cluster)
