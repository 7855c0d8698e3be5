"""S3 lifecycle through boto3: configurations round-trip (IDs given to rules without one),
refused ones answer S3's error and store nothing, and an object written under an enabled
expiration rule matching its key and tags carries X-Delete-At (seen through Swift) and
answers x-amz-expiration."""

from __future__ import annotations

import time

import pytest
from botocore.exceptions import ClientError

from tests.integration.s3_support import client, code_of

DAY = 86400


@pytest.fixture(scope="module")
def s3(cluster):
    return client(cluster)


def test_round_trip_and_delete(s3):
    s3.create_bucket(Bucket="life")
    with pytest.raises(ClientError) as exc:
        s3.get_bucket_lifecycle_configuration(Bucket="life")
    assert code_of(exc) == (404, "NoSuchLifecycleConfiguration")
    rules = [{"ID": "logs", "Expiration": {"Days": 31}, "Prefix": "logs/", "Status": "Enabled"},
             {"Expiration": {"ExpiredObjectDeleteMarker": True}, "Filter": {},
              "Status": "Disabled"},
             {"ID": "mpu", "Filter": {"And": {"Prefix": "a", "Tags": [
                 {"Key": "k", "Value": "v"}]}}, "Status": "Enabled",
              "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 2},
              "NoncurrentVersionExpiration": {"NoncurrentDays": 3}}]
    s3.put_bucket_lifecycle_configuration(Bucket="life", LifecycleConfiguration={
        "Rules": rules})
    got = s3.get_bucket_lifecycle_configuration(Bucket="life")["Rules"]
    assert got[0] == rules[0] and got[2] == rules[2]
    assert got[1]["ID"] and {k: v for k, v in got[1].items() if k != "ID"} == rules[1]
    assert s3.delete_bucket_lifecycle(Bucket="life")["ResponseMetadata"][
        "HTTPStatusCode"] == 204
    with pytest.raises(ClientError) as exc:
        s3.get_bucket_lifecycle_configuration(Bucket="life")
    assert code_of(exc) == (404, "NoSuchLifecycleConfiguration")


def test_refused_configurations_store_nothing(s3):
    s3.create_bucket(Bucket="badlife")
    good = [{"ID": "r", "Expiration": {"Days": 1}, "Prefix": "p/", "Status": "Enabled"}]
    s3.put_bucket_lifecycle_configuration(Bucket="badlife",
                                          LifecycleConfiguration={"Rules": good})
    base = {"Expiration": {"Days": 1}, "Prefix": "p/", "Status": "Enabled"}
    bad = [([{**base, "ID": "x" * 256}], (400, "InvalidArgument")),
           ([{**base, "ID": "a"}, {**base, "ID": "a"}], (400, "InvalidArgument")),
           ([{**base, "Status": "enabled"}], (400, "MalformedXML")),
           ([{**base, "Expiration": {"Days": 0}}], (400, "InvalidArgument")),
           ([{**base, "Expiration": {"Date": "20200101"}}], (400, "InvalidArgument")),
           ([{"Expiration": {"Days": 1}, "Status": "Enabled"}], (400, "MalformedXML")),
           ([{"Prefix": "p/", "Status": "Enabled"}], (400, "MalformedXML"))]
    for rules, expected in bad:
        with pytest.raises(ClientError) as exc:
            s3.put_bucket_lifecycle_configuration(Bucket="badlife",
                                                  LifecycleConfiguration={"Rules": rules})
        assert code_of(exc) == expected, rules
    assert s3.get_bucket_lifecycle_configuration(Bucket="badlife")["Rules"] == good


def test_expiration_stamps_new_objects(s3, cluster):
    s3.create_bucket(Bucket="expire")
    rules = [{"ID": "tmp", "Expiration": {"Days": 2}, "Prefix": "tmp/", "Status": "Enabled"},
             {"ID": "off", "Expiration": {"Days": 1}, "Prefix": "", "Status": "Disabled"},
             {"ID": "tagged", "Expiration": {"Date": "2099-01-01T00:00:00Z"},
              "Filter": {"Tag": {"Key": "temp", "Value": "yes"}}, "Status": "Enabled"}]
    s3.put_bucket_lifecycle_configuration(Bucket="expire",
                                          LifecycleConfiguration={"Rules": rules})
    before = time.time()
    s3.put_object(Bucket="expire", Key="tmp/a", Body=b"x")
    s3.put_object(Bucket="expire", Key="keep", Body=b"x")
    s3.put_object(Bucket="expire", Key="t", Body=b"x", Tagging="temp=yes")
    conn = cluster.connection()
    at = int(conn.head_object("expire", "tmp/a")["x-delete-at"])
    assert at % DAY == 0 and before + 2 * DAY <= at <= before + 3 * DAY
    head = s3.head_object(Bucket="expire", Key="tmp/a")
    assert head["Expiration"] == \
        f'expiry-date="{time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(at))}", ' \
        'rule-id="tmp"'
    assert "x-delete-at" not in conn.head_object("expire", "keep")
    assert "Expiration" not in s3.head_object(Bucket="expire", Key="keep")
    assert int(conn.head_object("expire", "t")["x-delete-at"]) == 4070908800
    assert 'rule-id="tagged"' in s3.get_object(Bucket="expire", Key="t")["Expiration"]
