"""The in-memory and DynamoDB/S3 benchmark stores pass the same suite: runs, scenario results,
comparisons, per-request records, and the reassembly of a stored run into the results schema."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from servingctl.costs import CompareInput, compare
from servingctl.loadgen.metrics import round_result, scenario_summary, with_request_metrics
from servingctl.loadgen.selfcheck import judge
from servingctl.schema.results import Calibration, RequestRecord, RunConfig, ServerChecks
from servingctl.store import DynamoStore, Phase
from servingctl.store.benchmarks import (
    BenchmarkRun,
    BenchmarkStore,
    Reproducibility,
    ResultExists,
    RunEnded,
    RunStatus,
    Split,
    StoredComparison,
    StoredScenario,
    run_result,
)
from servingctl.store.benchmarks_dynamodb import DynamoBenchmarkStore
from servingctl.store.benchmarks_memory import MemoryBenchmarkStore
from servingctl.store.dynamodb import create_table
from servingctl.store.migrate import Moved, migrate
from servingctl.store.records import (
    MemoryRecordStore,
    RecordsExist,
    RecordStore,
    S3RecordStore,
    decode_records,
    encode_records,
    records_key,
)

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
MS = 1_000_000
CONFIG = RunConfig(
    endpoint="http://alb.internal",
    model="m",
    headers={"X-LLM-Profile": "p"},
    input_tokens=[256],
    concurrencies=[1, 2],
    rounds=1,
    warmup=0,
    max_tokens=3,
)
CALIBRATION = Calibration(target_tokens=256, actual_tokens=254, repetitions=30, method="tokenize", unit="x ")


@pytest.fixture(params=["memory", "aws"])
def stores(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[BenchmarkStore, RecordStore]]:
    if request.param == "memory":
        yield MemoryBenchmarkStore(), MemoryRecordStore()
        return
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        resource = boto3.resource("dynamodb", region_name="us-east-1")
        create_table("servingctl-test", resource)
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="records")
        yield DynamoBenchmarkStore("servingctl-test", resource), S3RecordStore("records", s3)


def _run(run_id: str, profile: str = "deepseek-v4-flash", created: datetime = T0) -> BenchmarkRun:
    return BenchmarkRun(
        run_id=run_id,
        profile=profile,
        created_at=created,
        updated_at=created,
        request={"profile": profile},
        config=CONFIG,
        reproducibility=Reproducibility(
            profile=profile,
            model="m",
            model_id="nvidia/DeepSeek-V4-Flash-NVFP4",
            revision="48bfe38c",
            vllm_version="0.26.0",
            image="vllm/vllm-openai:v0.26.0",
            serving={"max_num_seqs": 4},
            pool="g7e-2gpu",
            instance_type="g7e.12xlarge",
            gpu_count=2,
            region="us-east-1",
            engine_version="0.1.0",
            results_schema_version=1,
            seed=42,
            salt_mode="cache-salt",
        ),
        scenarios=["in256-c1", "in256-c2"],
    )


def _running(store: BenchmarkStore, run_id: str) -> BenchmarkRun:
    """A run measuring (calibrated): the only status its workers may write results in."""
    store.create_run(_run(run_id))
    return store.update_run(run_id, T0, status=RunStatus.RUNNING)


def _records(name: str, concurrency: int) -> list[RequestRecord]:
    records = []
    for i in range(concurrency):
        start = i * MS
        chunks = [(start + 100 * MS, 1), (start + 120 * MS, 2)]
        records.append(
            with_request_metrics(
                RequestRecord(
                    scenario=name,
                    round=0,
                    index=i,
                    ok=True,
                    t_start_ns=start,
                    t_first_ns=chunks[0][0],
                    t_last_ns=chunks[-1][0],
                    t_end_ns=chunks[-1][0] + MS,
                    prompt_tokens=254,
                    completion_tokens=3,
                    finish_reason="length",
                    chunks=chunks,
                    token_counts_exact=True,
                )
            )
        )
    return records


def _scenario(run_id: str, concurrency: int, position: int, records: RecordStore) -> tuple[StoredScenario, list[RequestRecord]]:
    name = f"in256-c{concurrency}"
    recs = _records(name, concurrency)
    rounds = [round_result(0, False, recs)]
    summary = scenario_summary(
        name=name,
        config=CONFIG,
        calibration=CALIBRATION,
        concurrency=concurrency,
        records=recs,
        rounds=rounds,
        server=ServerChecks(available=False, reason="test"),
        client=judge([0.1] * 20, 0.1, 1.0, 5.0, 0.8),
    )
    key = records.put_records(records_key(run_id, name), recs)
    stored = StoredScenario(
        run_id=run_id,
        name=name,
        position=position,
        summary=summary,
        calibration=CALIBRATION,
        t0_wall=T0,
        rounds=rounds,
        records_key=key,
        records=len(recs),
        written_at=T0,
    )
    return stored, recs


def test_records_key_layout() -> None:
    assert records_key("r1", "in256-c4") == "runs/r1/in256-c4.jsonl.gz"
    assert records_key("r1", "in256-c4", shard=2) == "runs/r1/shards/in256-c4/2.jsonl.gz"
    assert records_key("r1", "in256-c4", attempt="a1") == "runs/r1/in256-c4.a1.jsonl.gz"
    assert records_key("r1", "in256-c4", shard=2, attempt="a1") == "runs/r1/shards/in256-c4/2.a1.jsonl.gz"


def test_a_records_object_is_written_once(stores) -> None:
    _, records = stores
    first, second = _records("in256-c1", 1), _records("in256-c1", 2)
    key = records.put_records(records_key("r1", "in256-c1", attempt="a0"), first)
    with pytest.raises(RecordsExist, match="already written"):
        records.put_records(key, second)
    assert records.get_records(key) == first
    assert records.get_records(records.put_records(records_key("r1", "in256-c1", attempt="a1"), second)) == second


def test_records_encoding_is_gzip_json_lines_and_round_trips() -> None:
    recs = _records("in256-c2", 2)
    blob = encode_records(recs)
    assert blob[:2] == b"\x1f\x8b" and blob == encode_records(recs)
    import gzip

    lines = gzip.decompress(blob).decode().splitlines()
    assert len(lines) == 2 and lines[0].startswith('{"scenario":"in256-c2"')
    assert decode_records(blob) == recs


def test_create_is_idempotent_and_get_returns_what_was_written(stores) -> None:
    store, _ = stores
    created = store.create_run(_run("20250301T090000Z-aaaaaa"))
    again = store.create_run(_run("20250301T090000Z-aaaaaa", profile="other"))
    assert again == created and again.profile == "deepseek-v4-flash"
    assert store.get_run("20250301T090000Z-aaaaaa") == created
    assert created.reproducibility.revision == "48bfe38c" and created.config == CONFIG
    assert store.get_run("missing") is None


def test_update_changes_only_the_given_fields(stores) -> None:
    store, _ = stores
    store.create_run(_run("r1"))
    later = T0 + timedelta(minutes=5)
    repro = store.get_run("r1").reproducibility.model_copy(update={"calibrations": [CALIBRATION]})
    updated = store.update_run("r1", later, status=RunStatus.RUNNING, reproducibility=repro, execution="arn:x")
    assert updated.status == RunStatus.RUNNING and updated.updated_at == later
    stored = store.get_run("r1")
    assert stored == updated
    assert stored.reproducibility.calibrations == [CALIBRATION] and stored.created_at == T0
    done = store.update_run("r1", later, status=RunStatus.FAILED, error="WorkerFailed: boom", finished_at=later)
    assert done.execution == "arn:x" and done.error == "WorkerFailed: boom"


def test_update_refuses_unknown_fields_and_missing_runs(stores) -> None:
    store, _ = stores
    store.create_run(_run("r1"))
    with pytest.raises(ValueError, match="unknown run field"):
        store.update_run("r1", T0, stauts="FAILED")
    with pytest.raises(KeyError, match="no benchmark run"):
        store.update_run("nope", T0, status=RunStatus.RUNNING)


def test_list_runs_newest_first_with_profile_filter_and_limit(stores) -> None:
    store, _ = stores
    for day, profile in enumerate(["a", "b", "a", "a"], start=1):
        store.create_run(_run(f"202503{day:02d}T090000Z-x", profile=profile))
    assert [r.run_id for r in store.list_runs()] == [f"202503{d:02d}T090000Z-x" for d in (4, 3, 2, 1)]
    assert [r.run_id for r in store.list_runs(profile="a", limit=2)] == ["20250304T090000Z-x", "20250303T090000Z-x"]
    assert store.list_runs(profile="zzz") == []


def test_scenarios_are_kept_in_run_order_with_their_records(stores) -> None:
    store, records = stores
    _running(store, "r1")
    second, recs2 = _scenario("r1", 2, 1, records)
    first, _recs1 = _scenario("r1", 1, 0, records)
    store.put_scenario(second)
    store.put_scenario(first)
    listed = store.list_scenarios("r1")
    assert [s.name for s in listed] == ["in256-c1", "in256-c2"]
    assert listed[1] == second and listed[1].summary.output_tok_s == second.summary.output_tok_s
    assert records.get_records(listed[1].records_key) == recs2
    assert store.list_scenarios("other") == []


def test_a_scenario_is_written_once_and_a_duplicate_leaves_the_first_intact(stores) -> None:
    store, records = stores
    _running(store, "r1")
    first, _ = _scenario("r1", 2, 0, records)
    store.put_scenario(first)
    duplicate = first.model_copy(
        update={"records_key": "runs/r1/in256-c2/other.jsonl.gz", "written_at": T0 + timedelta(seconds=9)}
    )
    with pytest.raises(ResultExists, match="scenario in256-c2 is already written"):
        store.put_scenario(duplicate)
    assert store.list_scenarios("r1") == [first] and store.get_scenario("r1", "in256-c2") == first
    assert store.get_scenario("r1", "in256-c1") is None


def test_the_merge_replaces_only_the_single_worker_result_it_read(stores) -> None:
    store, records = stores
    _running(store, "r1")
    first, _ = _scenario("r1", 2, 0, records)
    merged = first.model_copy(
        update={
            "split": Split(shards=2, reasons=["client CPU 95% of one core > 80%"]),
            "records_key": "runs/r1/in256-c2/merged.jsonl.gz",
        }
    )
    with pytest.raises(ResultExists):  # nothing to replace yet
        store.put_scenario(merged, replacing=first.records_key)
    store.put_scenario(first)
    with pytest.raises(ResultExists):  # not the result the merge read
        store.put_scenario(merged, replacing="runs/r1/in256-c2/someone-else.jsonl.gz")
    assert store.get_scenario("r1", "in256-c2") == first
    store.put_scenario(merged, replacing=first.records_key)
    [only] = store.list_scenarios("r1")
    assert only == merged and only.split is not None and only.split.shards == 2
    with pytest.raises(ResultExists):  # a second merge of the same single result: the first merge stays
        store.put_scenario(
            merged.model_copy(update={"records_key": "runs/r1/in256-c2/merged-2.jsonl.gz"}), replacing=first.records_key
        )
    assert store.list_scenarios("r1") == [merged]


@pytest.mark.parametrize("status", [RunStatus.PLANNED, RunStatus.SUCCEEDED, RunStatus.FAILED])
def test_results_are_refused_unless_the_run_is_running(stores, status: RunStatus) -> None:
    store, records = stores
    store.create_run(_run("r1"))
    store.update_run("r1", T0, status=status)
    scenario, _ = _scenario("r1", 1, 0, records)
    with pytest.raises(RunEnded, match=f"r1 is {status.value}, not RUNNING"):
        store.put_scenario(scenario)
    with pytest.raises(RunEnded):
        store.put_comparison(_comparison("r1"))
    with pytest.raises(RunEnded, match="is gone"):
        store.put_scenario(scenario.model_copy(update={"run_id": "never-created"}))
    assert store.list_scenarios("r1") == [] and store.list_comparisons("r1") == []


def test_an_update_with_when_is_refused_once_the_run_left_those_statuses(stores) -> None:
    store, _ = stores
    store.create_run(_run("r1"))
    live = (RunStatus.PLANNED, RunStatus.RUNNING)
    assert store.update_run("r1", T0, when=live, status=RunStatus.RUNNING).status == RunStatus.RUNNING
    store.update_run("r1", T0, when=live, status=RunStatus.FAILED, error="execution ABORTED")
    with pytest.raises(RunEnded, match="r1 is FAILED, not PLANNED or RUNNING"):  # a late worker cannot revive it
        store.update_run("r1", T0 + timedelta(seconds=1), when=live, status=RunStatus.RUNNING)
    stored = store.get_run("r1")
    assert stored.status == RunStatus.FAILED and stored.error == "execution ABORTED" and stored.updated_at == T0


def test_missing_records_raise_key_error(stores) -> None:
    _, records = stores
    with pytest.raises(KeyError, match="no records"):
        records.get_records(records_key("r1", "nothing"))


def _comparison(run_id: str) -> StoredComparison:
    comparison = compare(
        CompareInput(
            output_tok_s=358.41,
            input_tokens=254,
            output_tokens=256,
            api_input_usd_per_m=0.22,
            api_output_usd_per_m=0.66,
            hourly_usd=12.17,
        )
    )
    return StoredComparison(
        run_id=run_id,
        scenario="in256-c4",
        api="fireworks/deepseek-v4-flash",
        instance_type="g7e.12xlarge",
        hourly_usd=12.17,
        price_source="catalog",
        comparison=comparison,
        written_at=T0,
    )


def test_comparisons_round_trip_and_are_written_once(stores) -> None:
    store, _ = stores
    _running(store, "r1")
    stored = _comparison("r1")
    store.put_comparison(stored)
    with pytest.raises(ResultExists, match="comparison in256-c4"):
        store.put_comparison(stored.model_copy(update={"hourly_usd": 99.0}))
    [back] = store.list_comparisons("r1")
    assert back == stored and round(back.comparison.ratio_self_hosted_to_api, 2) == 10.74


# The headline throughput's names before it became output_tok_s (its rounds: rounds_output_tok_s).
OLD_NAMES = (('"rounds_output_tok_s"', '"aggregate_tok_s_rounds"'), ('"output_tok_s"', '"aggregate_tok_s"'))


def test_items_written_under_the_old_throughput_names_still_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        resource = boto3.resource("dynamodb", region_name="us-east-1")
        create_table("servingctl-test", resource)
        store = DynamoBenchmarkStore("servingctl-test", resource)
        _running(store, "r1")
        scenario, _ = _scenario("r1", 2, 0, MemoryRecordStore())
        store.put_scenario(scenario)
        store.put_comparison(_comparison("r1"))
        table = resource.Table("servingctl-test")
        written = {i["kind"]: i for i in table.scan()["Items"]}
        for kind in ("benchmark-scenario", "benchmark-comparison"):
            doc = written[kind]["doc"]
            assert '"output_tok_s"' in doc and "aggregate_tok_s" not in doc  # a new write: the new names
            for new, old in OLD_NAMES:
                doc = doc.replace(new, old)
            assert '"aggregate_tok_s"' in doc
            table.put_item(Item=written[kind] | {"doc": doc})  # as the previous version wrote it
        assert store.get_scenario("r1", scenario.name) == scenario
        assert store.list_comparisons("r1") == [_comparison("r1")]


def test_run_result_reassembles_the_results_schema(stores) -> None:
    store, records = stores
    _running(store, "r1")
    for position, concurrency in enumerate((1, 2)):
        store.put_scenario(_scenario("r1", concurrency, position, records)[0])
    run = store.get_run("r1")
    result = run_result(run, store, records)
    assert result.config == CONFIG and result.metadata.run_id == "r1"
    assert [s.summary.name for s in result.scenarios] == ["in256-c1", "in256-c2"]
    assert [len(s.records) for s in result.scenarios] == [1, 2]
    assert result.failed_scenarios == []
    light = run_result(run, store)
    assert [len(s.records) for s in light.scenarios] == [0, 0]
    assert light.scenarios[1].summary == result.scenarios[1].summary


# ---- servingctl.store.migrate: the shared-partition layout moved to one partition per profile and run ----
MIGRATED_TABLE = "servingctl-migrate"


@pytest.fixture
def migrating(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        resource = boto3.resource("dynamodb", region_name="us-east-1")
        create_table(MIGRATED_TABLE, resource)
        yield resource


def _old_layout(resource: Any) -> None:
    """Two profiles and a run as the earlier stores wrote them."""
    table = resource.Table(MIGRATED_TABLE)
    for name, phase in (("nemotron-nano", "READY"), ("deepseek-v4-flash", "STOPPED")):
        table.put_item(
            Item={"pk": "profile", "sk": name, "kind": "profile", "profile": name, "phase": phase, "updated_at": T0.isoformat()}
        )
    run = _run("2026-12-01T09-00-00Z-a", profile="nemotron-nano")
    table.put_item(
        Item={
            "pk": "run",
            "sk": run.run_id,
            "kind": "benchmark-run",
            "profile": run.profile,
            "status": run.status.value,
            "created_at": T0.isoformat(),
            "version": 1,
            "doc": run.model_dump_json(),
        }
    )


def test_old_items_move_and_the_stores_read_them(migrating: Any) -> None:
    _old_layout(migrating)
    profiles, runs = DynamoStore(MIGRATED_TABLE, migrating), DynamoBenchmarkStore(MIGRATED_TABLE, migrating)
    assert profiles.list_profiles() == [] and runs.list_runs() == []  # invisible before

    assert migrate(MIGRATED_TABLE, migrating) == Moved(copied=3, deleted=3, already_there=0)

    assert [(s.profile, s.phase) for s in profiles.list_profiles()] == [
        ("deepseek-v4-flash", Phase.STOPPED),
        ("nemotron-nano", Phase.READY),
    ]
    assert profiles.get_profile("nemotron-nano").phase == Phase.READY
    [run] = runs.list_runs()
    assert run.run_id == "2026-12-01T09-00-00Z-a" and runs.get_run(run.run_id) == run
    # The moved run takes updates under its new key (the version came along).
    assert runs.update_run(run.run_id, T0, label="moved").label == "moved"
    keys = sorted((i["pk"], i["sk"]) for i in migrating.Table(MIGRATED_TABLE).scan()["Items"])
    assert keys == [
        ("profile#deepseek-v4-flash", "state"),
        ("profile#nemotron-nano", "state"),
        ("run#2026-12-01T09-00-00Z-a", "run"),
    ]


def test_a_second_run_moves_nothing(migrating: Any) -> None:
    _old_layout(migrating)
    migrate(MIGRATED_TABLE, migrating)
    before = migrating.Table(MIGRATED_TABLE).scan()["Items"]
    assert migrate(MIGRATED_TABLE, migrating) == Moved(copied=0, deleted=0, already_there=0)
    assert migrating.Table(MIGRATED_TABLE).scan()["Items"] == before


def test_an_interrupted_migration_keeps_the_newer_record(migrating: Any) -> None:
    # The new record exists already (written after a crash between copy and delete, then updated):
    # the old copy is dropped, the new one kept as it is.
    _old_layout(migrating)
    profiles = DynamoStore(MIGRATED_TABLE, migrating)
    profiles.update_profile("nemotron-nano", T0, phase=Phase.STOPPING)
    assert migrate(MIGRATED_TABLE, migrating) == Moved(copied=2, deleted=3, already_there=1)
    assert profiles.get_profile("nemotron-nano").phase == Phase.STOPPING
