"""Benchmark store on the one DynamoDB table (keys pk, sk).

Item layout (every item carries `kind` and the record as one JSON string `doc`, so nested results
round-trip exactly, floats included; a few plain attributes make the console readable):
  run         pk="run#<run id>"   sk="run"                    profile, status, created_at, version (N),
                                                              lpk="run", lsk=<run id>
  scenario    pk="run#<run id>"   sk="scenario#<name>"        position (N), records_key
  comparison  pk="run#<run id>"   sk="comparison#<scenario>"
A run's items share one partition (IAM scopes a run's writers to it by dynamodb:LeadingKeys). Run ids
start with their UTC creation time, so a descending query of the listing index (lpk="run", sparse,
eventually consistent) lists newest first.
Run updates are optimistic: the write is conditional on the version that was read (and, when the
caller says so, on the status it read). Scenarios and comparisons are written in one transaction
with a condition check of their run's status (RUNNING), and only where none is written yet, or (the
shard merge) only over the item whose records_key the merge read.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

import boto3
from boto3.dynamodb.conditions import Attr, Key
from botocore.exceptions import ClientError

from servingctl.store.benchmarks import (
    LIVE,
    BenchmarkRun,
    ResultExists,
    RunEnded,
    RunStatus,
    StoredComparison,
    StoredScenario,
    apply_run_changes,
)
from servingctl.store.dynamodb import LIST_PK, LIST_SK, LISTING_INDEX, transact

RUN_SK = "run"
# A run update retries this often when another writer changed the run in between.
UPDATE_ATTEMPTS = 5


def _run_pk(run_id: str) -> str:
    return f"run#{run_id}"


def _run_key(run_id: str) -> dict[str, str]:
    return {"pk": _run_pk(run_id), "sk": RUN_SK}


def _scenario_key(run_id: str, name: str) -> dict[str, str]:
    return {"pk": _run_pk(run_id), "sk": f"scenario#{name}"}


def _comparison_key(run_id: str, scenario: str) -> dict[str, str]:
    return {"pk": _run_pk(run_id), "sk": f"comparison#{scenario}"}


def _doc(item: Mapping[str, object]) -> str:
    """The JSON document an item carries (written as a string)."""
    doc = item["doc"]
    if not isinstance(doc, str):
        raise TypeError(f"item {item.get('pk')}/{item.get('sk')}: doc is a {type(doc).__name__}, not a string")
    return doc


def _number(item: Mapping[str, object], name: str) -> Decimal:
    """A number attribute (the DynamoDB resource reads numbers as Decimal)."""
    value = item[name]
    if not isinstance(value, Decimal):
        raise TypeError(f"item {item.get('pk')}/{item.get('sk')}: {name} is a {type(value).__name__}, not a number")
    return value


def _conditional_failure(exc: ClientError) -> bool:
    return exc.response["Error"]["Code"] == "ConditionalCheckFailedException"


class DynamoBenchmarkStore:
    """The benchmark store on one DynamoDB table."""

    def __init__(self, table_name: str, resource: Any | None = None) -> None:
        self._table = (resource or boto3.resource("dynamodb")).Table(table_name)
        self._client = self._table.meta.client

    # ---- runs ----------------------------------------------------------------------------------
    def _run_item(self, run: BenchmarkRun, version: int) -> dict[str, Any]:
        return _run_key(run.run_id) | {
            "kind": "benchmark-run",
            LIST_PK: "run",
            LIST_SK: run.run_id,
            "profile": run.profile,
            "status": run.status.value,
            "created_at": run.model_dump(mode="json")["created_at"],
            "version": version,
            "doc": run.model_dump_json(),
        }

    def _read_run(self, run_id: str) -> tuple[BenchmarkRun, int] | None:
        item = self._table.get_item(Key=_run_key(run_id), ConsistentRead=True).get("Item")
        if not item:
            return None
        return BenchmarkRun.model_validate_json(_doc(item)), int(_number(item, "version"))

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

    def update_run(
        self, run_id: str, now: datetime, *, when: Collection[RunStatus] | None = None, **changes: Any
    ) -> BenchmarkRun:
        """Set the given fields of a run (KeyError when absent), only while its status is one of
        `when` if given (RunEnded otherwise, nothing written); returns the new record."""
        for _ in range(UPDATE_ATTEMPTS):
            found = self._read_run(run_id)
            if found is None:
                raise KeyError(f"no benchmark run {run_id!r}")
            current, version = found
            # The version condition below makes this check hold at the write.
            if when is not None and current.status not in when:
                raise RunEnded(run_id, current.status, when)
            updated = apply_run_changes(current, now, changes)
            try:
                self._table.put_item(Item=self._run_item(updated, version + 1), ConditionExpression=Attr("version").eq(version))
                return updated
            except ClientError as exc:
                if not _conditional_failure(exc):
                    raise
        raise RuntimeError(f"benchmark run {run_id}: {UPDATE_ATTEMPTS} concurrent updates in a row, giving up")

    def list_runs(self, profile: str | None = None, limit: int = 50) -> list[BenchmarkRun]:
        """Runs newest first (run ids sort by creation time), optionally of one profile (from the
        listing index: eventually consistent)."""
        kwargs: dict[str, Any] = {
            "IndexName": LISTING_INDEX,
            "KeyConditionExpression": Key(LIST_PK).eq("run"),
            "ScanIndexForward": False,
        }
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
    def _put_result(self, run_id: str, item: dict[str, Any], what: str, replacing: str | None = None) -> None:
        """One transaction: the run still RUNNING, and the item new (or still the one replaced)."""
        check = {
            "ConditionCheck": {
                "TableName": self._table.name,
                "Key": _run_key(run_id),
                "ConditionExpression": "#status = :live",
                "ExpressionAttributeNames": {"#status": "status"},
                "ExpressionAttributeValues": {":live": RunStatus.RUNNING.value},
            }
        }
        put: dict[str, Any] = {"TableName": self._table.name, "Item": item, "ConditionExpression": "attribute_not_exists(pk)"}
        if replacing is not None:
            put |= {"ConditionExpression": "records_key = :replacing", "ExpressionAttributeValues": {":replacing": replacing}}
        reasons = transact(self._client, [check, {"Put": put}])
        if reasons is None:
            return
        if reasons[0] == "ConditionalCheckFailed":
            run = self.get_run(run_id)
            raise RunEnded(run_id, run.status if run else None, LIVE)
        raise ResultExists(run_id, what)

    def put_scenario(self, scenario: StoredScenario, replacing: str | None = None) -> StoredScenario:
        """Write a finished scenario while its run is RUNNING (RunEnded otherwise): once (ResultExists
        when it is written already), or, with `replacing`, over the stored result whose records_key
        that is and nothing else (the shard merge over the single-worker result it read)."""
        item = _scenario_key(scenario.run_id, scenario.name) | {
            "kind": "benchmark-scenario",
            "position": scenario.position,
            "records_key": scenario.records_key,
            "doc": scenario.model_dump_json(),
        }
        self._put_result(scenario.run_id, item, f"scenario {scenario.name}", replacing)
        return scenario

    def get_scenario(self, run_id: str, name: str) -> StoredScenario | None:
        """One scenario result, None when not written."""
        item = self._table.get_item(Key=_scenario_key(run_id, name), ConsistentRead=True).get("Item")
        return StoredScenario.model_validate_json(_doc(item)) if item else None

    def list_scenarios(self, run_id: str) -> list[StoredScenario]:
        """The run's scenario results in run order."""
        items = self._query(
            {"KeyConditionExpression": Key("pk").eq(_run_pk(run_id)) & Key("sk").begins_with("scenario#"), "ConsistentRead": True}
        )
        found = [StoredScenario.model_validate_json(i["doc"]) for i in items]
        return sorted(found, key=lambda s: (s.position, s.name))

    def put_comparison(self, comparison: StoredComparison) -> StoredComparison:
        """Write one scenario's cost comparison once, while its run is RUNNING (ResultExists, RunEnded)."""
        item = _comparison_key(comparison.run_id, comparison.scenario) | {
            "kind": "benchmark-comparison",
            "doc": comparison.model_dump_json(),
        }
        self._put_result(comparison.run_id, item, f"comparison {comparison.scenario}")
        return comparison

    def list_comparisons(self, run_id: str) -> list[StoredComparison]:
        """The run's cost comparisons, by scenario name."""
        items = self._query(
            {
                "KeyConditionExpression": Key("pk").eq(_run_pk(run_id)) & Key("sk").begins_with("comparison#"),
                "ConsistentRead": True,
            }
        )
        return sorted((StoredComparison.model_validate_json(i["doc"]) for i in items), key=lambda c: c.scenario)
