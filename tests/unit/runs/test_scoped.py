"""servingctl.runs.scoped on moto: the stores of one run come from BenchRunRole sessions tagged
with the run (and its profile, read from the run when the event does not name it); session names in
STS's alphabet; a bounded number of sessions kept."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from servingctl.runs import scoped
from servingctl.runs.scoped import KEPT_SESSIONS, RunScopes, session_name, session_tags
from servingctl.store.benchmarks_dynamodb import DynamoBenchmarkStore
from servingctl.store.dynamodb import create_table

ROLE = "arn:aws:iam::123456789012:role/servingctl-BenchRunRole"


class _RecordingSts:
    """moto's STS, with the AssumeRole calls kept (moto does not keep session tags)."""

    def __init__(self) -> None:
        self.client = boto3.client("sts", region_name="us-east-1")
        self.calls: list[dict[str, Any]] = []

    def assume_role(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        return self.client.assume_role(**kwargs)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        create_table("state", boto3.resource("dynamodb"))
        yield


def test_a_step_naming_only_its_run_reads_the_profile_with_a_run_only_session(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    read_with: list[Any] = []

    def get_run(store: DynamoBenchmarkStore, run_id: str) -> Any:
        read_with.append(store)
        return type("Run", (), {"profile": "nemotron-nano"})() if run_id == "r1" else None

    monkeypatch.setattr(scoped.DynamoBenchmarkStore, "get_run", get_run)
    sts = _RecordingSts()
    scopes = RunScopes(ROLE, "state", "records", sts=sts)
    _runs, records, _profiles = scopes("r1", None)
    assert [c["Tags"] for c in sts.calls] == [session_tags("r1", None), session_tags("r1", "nemotron-nano")]
    assert {c["RoleArn"] for c in sts.calls} == {ROLE} and {c["RoleSessionName"] for c in sts.calls} == {"bench-r1"}
    # The stores are on the tagged session's credentials, not the function's own.
    key = scopes.session("r1", "nemotron-nano").get_credentials().access_key
    assert records._s3._request_signer._credentials.access_key == key
    assert key != boto3.Session().get_credentials().access_key
    # Known now: the next step of the run assumes nothing more; a step naming its profile needs no read.
    scopes("r1", None)
    scopes("r1", "nemotron-nano")
    assert len(sts.calls) == 2 and len(read_with) == 1
    # An unrecorded run: its run-only session (the step then says the run is not found).
    scopes("r-unknown", None)
    assert sts.calls[-1]["Tags"] == session_tags("r-unknown", None)


def test_sessions_kept_are_bounded(aws: None) -> None:
    sts = _RecordingSts()
    scopes = RunScopes(ROLE, "state", "records", sts=sts)
    for i in range(KEPT_SESSIONS + 1):
        scopes.session(f"r{i}", "p")
    scopes.session("r0", "p")  # the oldest was let go: assumed again
    assert len(sts.calls) == KEPT_SESSIONS + 2
    scopes.session(f"r{KEPT_SESSIONS}", "p")  # a recent one is kept
    assert len(sts.calls) == KEPT_SESSIONS + 2


def test_session_names_and_tags() -> None:
    assert session_name("20261206T015532Z-ef7cf6") == "bench-20261206T015532Z-ef7cf6"
    assert session_name("a b/c:" + "x" * 80) == ("bench-a-b-c-" + "x" * 80)[:64]
    assert session_tags("r1", "p") == [{"Key": "run", "Value": "r1"}, {"Key": "profile", "Value": "p"}]
    assert session_tags("r1", None) == [{"Key": "run", "Value": "r1"}]
