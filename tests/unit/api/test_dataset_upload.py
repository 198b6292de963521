"""POST /benchmarks/{run_id}/dataset's presigned PUT as S3 receives it: SigV4 in every region (the
size, the checksum and If-None-Match signed, so S3 refuses any other upload), for a new run id only,
and the body's bounds at the limit and one past."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest
from botocore.exceptions import ClientError
from pydantic import ValidationError

from servingctl.api.benchmarks import PRESIGN_CONFIG, upload_dataset
from servingctl.api.models import DatasetUploadRequest
from servingctl.api.service import BadRequest, Conflict
from servingctl.runs.matrix import MAX_UPLOAD_BYTES
from servingctl.store.benchmarks_memory import MemoryBenchmarkStore

MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:servingctl-run-benchmark"
SHA = "ab" * 32


class Executions:
    """describe_execution of the named executions (others: ExecutionDoesNotExist, as Step Functions answers)."""

    def __init__(self, *names: str) -> None:
        self.names = set(names)

    def describe_execution(self, executionArn: str) -> dict[str, Any]:
        if executionArn.rsplit(":", 1)[1] in self.names:
            return {"executionArn": executionArn, "status": "RUNNING"}
        raise ClientError({"Error": {"Code": "ExecutionDoesNotExist", "Message": "no"}}, "DescribeExecution")


def deps(*executions: str, region: str = "us-east-1") -> Any:
    s3 = boto3.client(
        "s3", region_name=region, config=PRESIGN_CONFIG, aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret"
    )
    return SimpleNamespace(
        runs=MemoryBenchmarkStore(), s3=s3, records_bucket="records", sfn=Executions(*executions), bench_machine_arn=MACHINE
    )


@pytest.mark.parametrize("region", ["us-east-1", "eu-central-1"])
def test_the_upload_url_is_sigv4_and_signs_size_checksum_and_if_none_match(region: str) -> None:
    upload = upload_dataset(deps(region=region), "20261206T120000Z-ab12cd", 1234, SHA)
    query = parse_qs(urlsplit(upload.url).query)
    assert query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]  # not SigV2, which signs no header
    signed = set(query["X-Amz-SignedHeaders"][0].split(";"))
    assert {"content-length", "content-type", "if-none-match", "x-amz-checksum-sha256", "host"} <= signed
    assert urlsplit(upload.url).path.endswith("/runs/20261206T120000Z-ab12cd/dataset.jsonl")
    assert upload.headers["Content-Length"] == "1234" and upload.headers["If-None-Match"] == "*"
    assert upload.key == "runs/20261206T120000Z-ab12cd/dataset.jsonl" and upload.expires_in_s == 900


def test_a_bad_or_used_run_id_is_refused_naming_it() -> None:
    with pytest.raises(BadRequest, match=r"path.run_id: 'x/../y'; expected"):
        upload_dataset(deps(), "x/../y", 10, SHA)
    with pytest.raises(Conflict, match="run 20261206T120000Z-used exists already"):
        upload_dataset(deps("bench-20261206T120000Z-used"), "20261206T120000Z-used", 10, SHA)


def test_the_upload_size_at_the_limit_and_one_past() -> None:
    assert DatasetUploadRequest.model_validate({"size_bytes": MAX_UPLOAD_BYTES, "sha256": SHA}).size_bytes == MAX_UPLOAD_BYTES
    with pytest.raises(ValidationError, match="less than or equal to 67108864"):
        DatasetUploadRequest.model_validate({"size_bytes": MAX_UPLOAD_BYTES + 1, "sha256": SHA})
    with pytest.raises(ValidationError, match="String should match pattern"):
        DatasetUploadRequest.model_validate({"size_bytes": 1, "sha256": "AB" * 32})
