"""Benchmark store on the one DynamoDB table (keys pk, sk).

Item layout (every item carries `kind` and the record as one JSON string `doc`, so nested results
round-trip exactly, floats included; a few plain attributes make the console readable):
  run         pk="run"            sk=<run id>                 profile, status, created_at, version (N)
  scenario    pk="run#<run id>"   sk="scenario#<name>"        position (N)
  comparison  pk="run#<run id>"   sk="comparison#<scenario>"
Run ids start with their UTC creation time, so a descending query on pk="run" lists newest first.
Run updates are optimistic: the write is conditional on the version that was read.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import boto3
from boto3.dynamodb.conditions import Attr, Key
from botocore.exceptions import ClientError

from servingctl.store.benchmarks import BenchmarkRun, StoredComparison, StoredScenario, apply_run_changes

RUN_PK = "run"
# A run update retries this often when another writer changed the run in between.
UPDATE_ATTEMPTS = 5


def _run_pk(run_id: str) -> str:
    return f"run#{run_id}"


def _conditional_failure(exc: ClientError) -> bool:
    return exc.response["Error"]["Code"] == "ConditionalCheckFailedException"


class DynamoBenchmarkStore:
    """The benchmark store on one DynamoDB table."""

    def __init__(self, table_name: str, resource: Any | None = None) -> None:
        self._table = (resource or boto3.resource("dynamodb")).Table(table_name)

    # ---- runs ----------------------------------------------------------------------------------
    def _run_item(self, run: BenchmarkRun, version: int) -> dict[str, Any]:
        return {
            "pk": RUN_PK,
            "sk": run.run_id,
            "kind": "benchmark-run",
            "profile": run.profile,
            "status": run.status.value,
            "created_at": run.model_dump(mode="json")["created_at"],
            "version": version,
            "doc": run.model_dump_json(),
        }

    def _read_run(self, run_id: str) -> tuple[BenchmarkRun, int] | None:
        item = self._table.get_item(Key={"pk": RUN_PK, "sk": run_id}, ConsistentRead=True).get("Item")
        if not item:
            return None
        return BenchmarkRun.model_validate_json(item["doc"]), int(item["version"])

    def create_run(self, run: BenchmarkRun) -> BenchmarkRun:
        """Record a new run; creating the same run_id again returns the stored one unchanged."""
        try:
            self._table.put_item(Item=self._run_item(run, 1), ConditionExpression=Attr("pk").not_exists())
        except ClientError as exc:
            if not _conditional_failure(exc):
                raise
        stored = self.get_run(run.run_id)
        assert stored is not None  # written above or already there
        return stored

    def get_run(self, run_id: str) -> BenchmarkRun | None:
        """One run, None when absent."""
        found = self._read_run(run_id)
        return found[0] if found else None

    def update_run(self, run_id: str, now: datetime, **changes: Any) -> BenchmarkRun:
        """Set the given fields of a run (KeyError when absent); returns the new record."""
        for _ in range(UPDATE_ATTEMPTS):
            found = self._read_run(run_id)
            if found is None:
                raise KeyError(f"no benchmark run {run_id!r}")
            current, version = found
            updated = apply_run_changes(current, now, changes)
            try:
                self._table.put_item(Item=self._run_item(updated, version + 1), ConditionExpression=Attr("version").eq(version))
                return updated
            except ClientError as exc:
                if not _conditional_failure(exc):
                    raise
        raise RuntimeError(f"benchmark run {run_id}: {UPDATE_ATTEMPTS} concurrent updates in a row, giving up")

    def list_runs(self, profile: str | None = None, limit: int = 50) -> list[BenchmarkRun]:
        """Runs newest first (run ids sort by creation time), optionally of one profile."""
        kwargs: dict[str, Any] = {"KeyConditionExpression": Key("pk").eq(RUN_PK), "ScanIndexForward": False}
        if profile is not None:
            kwargs["FilterExpression"] = Attr("profile").eq(profile)
        runs: list[BenchmarkRun] = []
        for item in self._query(kwargs):
            runs.append(BenchmarkRun.model_validate_json(item["doc"]))
            if len(runs) >= limit:
                break
        return runs

    def _query(self, kwargs: dict[str, Any]) -> Iterator[dict[str, Any]]:
        while True:
            page = self._table.query(**kwargs)
            yield from page["Items"]
            if "LastEvaluatedKey" not in page:
                return
            kwargs = kwargs | {"ExclusiveStartKey": page["LastEvaluatedKey"]}

    # ---- scenarios and comparisons -------------------------------------------------------------
    def put_scenario(self, scenario: StoredScenario) -> StoredScenario:
        """Write a scenario result (a rerun of the same scenario replaces it)."""
        self._table.put_item(
            Item={
                "pk": _run_pk(scenario.run_id),
                "sk": f"scenario#{scenario.name}",
                "kind": "benchmark-scenario",
                "position": scenario.position,
                "doc": scenario.model_dump_json(),
            }
        )
        return scenario

    def list_scenarios(self, run_id: str) -> list[StoredScenario]:
        """The run's scenario results in run order."""
        items = self._query(
            {"KeyConditionExpression": Key("pk").eq(_run_pk(run_id)) & Key("sk").begins_with("scenario#"), "ConsistentRead": True}
        )
        found = [StoredScenario.model_validate_json(i["doc"]) for i in items]
        return sorted(found, key=lambda s: (s.position, s.name))

    def put_comparison(self, comparison: StoredComparison) -> StoredComparison:
        """Write one scenario's cost comparison (replacing an earlier one)."""
        self._table.put_item(
            Item={
                "pk": _run_pk(comparison.run_id),
                "sk": f"comparison#{comparison.scenario}",
                "kind": "benchmark-comparison",
                "doc": comparison.model_dump_json(),
            }
        )
        return comparison

    def list_comparisons(self, run_id: str) -> list[StoredComparison]:
        """The run's cost comparisons, by scenario name."""
        items = self._query(
            {"KeyConditionExpression": Key("pk").eq(_run_pk(run_id)) & Key("sk").begins_with("comparison#"), "ConsistentRead": True}
        )
        return sorted((StoredComparison.model_validate_json(i["doc"]) for i in items), key=lambda c: c.scenario)
