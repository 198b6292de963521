"""doctor's weights check reads the snapshot the model server would load: the pinned revision, or
for a profile that pins none the one refs/main names (the lexically last snapshot is not the newest:
snapshot names are commit hashes), and says which it checked."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from servingctl_cli.doctor import INDEX_FILE, Result, report_lines, weights_problem

BUCKET = "weights"
TREE = "hf-hub/models--org--model"
OLD, NEW = "f" * 40, "a" * 40  # NEW sorts first: refs/main, not the order of names, says which is current


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        client = boto3.client("s3", aws_access_key_id="testing", aws_secret_access_key="testing")
        client.create_bucket(Bucket=BUCKET)
        for snapshot in (OLD, NEW):
            index = {"weight_map": {"w": "model-00001-of-00001.safetensors"}}
            client.put_object(Bucket=BUCKET, Key=f"{TREE}/snapshots/{snapshot}/{INDEX_FILE}", Body=json.dumps(index).encode())
        # Only the current snapshot is complete.
        client.put_object(Bucket=BUCKET, Key=f"{TREE}/snapshots/{NEW}/model-00001-of-00001.safetensors", Body=b"x" * 1000)
        yield client


def test_an_unpinned_profile_is_checked_at_the_snapshot_refs_main_names(s3: Any) -> None:
    s3.put_object(Bucket=BUCKET, Key=f"{TREE}/refs/main", Body=NEW.encode())
    text, complete = weights_problem(s3, BUCKET, TREE, None, None)
    assert complete, text
    assert text.startswith(f"s3://{BUCKET}/{TREE}/snapshots/{NEW} (refs/main's: no revision pinned): 2 files")


def test_refs_main_naming_an_incomplete_snapshot_fails_naming_it(s3: Any) -> None:
    s3.put_object(Bucket=BUCKET, Key=f"{TREE}/refs/main", Body=OLD.encode())
    text, complete = weights_problem(s3, BUCKET, TREE, None, None)
    assert not complete
    assert f"snapshots/{OLD} (refs/main's: no revision pinned): 1 files" in text
    assert "1 of 1 shards the index names are missing" in text


def test_no_refs_main_and_no_pin_fails_saying_the_server_cannot_choose(s3: Any) -> None:
    text, complete = weights_problem(s3, BUCKET, TREE, None, None)
    assert not complete
    assert text == (
        f"no revision pinned and no s3://{BUCKET}/{TREE}/refs/main: the model server, offline, cannot tell which "
        f"snapshot to load (found {NEW}, {OLD}; pin serving.revision in the registry, or upload the Hugging Face "
        "cache tree, which holds refs/main)"
    )


def test_refs_main_naming_a_snapshot_not_uploaded_fails_naming_both(s3: Any) -> None:
    s3.put_object(Bucket=BUCKET, Key=f"{TREE}/refs/main", Body=b"0" * 40)
    text, complete = weights_problem(s3, BUCKET, TREE, None, None)
    assert not complete and text.startswith(f"no snapshot '{'0' * 40}' (refs/main's: no revision pinned) under s3://")


def test_a_pinned_revision_is_checked_whatever_refs_main_says(s3: Any) -> None:
    s3.put_object(Bucket=BUCKET, Key=f"{TREE}/refs/main", Body=OLD.encode())
    text, complete = weights_problem(s3, BUCKET, TREE, NEW, None)
    assert complete and f"snapshots/{NEW} (pinned): 2 files" in text


@pytest.mark.parametrize("columns", [40, 60, 200])
def test_the_report_fits_the_terminal_and_keeps_ids_and_fixes_whole(columns: int) -> None:
    quota = "Running On-Demand G and VT instances (L-DB2E81BA) is 0 vCPUs; the pool g7e-2gpu needs 48"
    results = [
        Result("credentials", True, "arn:aws:iam::123456789012:user/someone in us-east-1"),
        Result("gpu quota", False, quota, "request 48 vCPUs: aws service-quotas request-service-quota-increase"),
    ]
    lines = report_lines(results, columns)
    # only a word longer than the line (the ARN at 40) goes past it, whole
    assert all(len(line) <= columns or len(line.split()) == 1 for line in lines), lines
    assert lines[0].startswith("PASS  credentials:") and lines[-1] == "1 passed, 1 failed"
    failed = next(i for i, line in enumerate(lines) if line.startswith("FAIL  "))
    assert all(line.startswith(" " * 6) for line in lines[1:failed] + lines[failed + 1 : -1])
    text = " ".join(" ".join(line.split()) for line in lines)
    assert quota in text and "fix: request 48 vCPUs: aws service-quotas request-service-quota-increase" in text
    assert "arn:aws:iam::123456789012:user/someone" in text
