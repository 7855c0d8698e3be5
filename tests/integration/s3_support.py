"""boto3 clients for the S3 tests: path style, the proxy as endpoint, tempauth users."""

from __future__ import annotations

import boto3
import pytest
from botocore.config import Config

from tests.helpers import cluster_logs


def client(cluster, user: str = "test:tester", key: str = "testing", sig: str = "s3v4",
           **config):
    return boto3.client(
        "s3", endpoint_url=cluster.proxy_url, region_name="us-east-1",
        aws_access_key_id=user, aws_secret_access_key=key,
        config=Config(signature_version=sig, s3={"addressing_style": "path"},
                      retries={"max_attempts": 1}, **config))


def log_text(cluster) -> str:
    return cluster_logs(cluster.root)


def code_of(exc: pytest.ExceptionInfo) -> tuple[int, str]:
    """A refused boto3 call's HTTP status and S3 error code."""
    err = exc.value.response
    return err["ResponseMetadata"]["HTTPStatusCode"], err["Error"]["Code"]
