"""Benchmark runs in storage: the run record (config, reproducibility record, status), one item per
finished scenario, one cost comparison per scenario, the interface both implementations share
(DynamoDB: servingctl.store.benchmarks_dynamodb, in-memory: servingctl.store.benchmarks_memory),
and the reassembly of a stored run into the results schema the report outputs read.

Per-request records are not here: they go to S3 (servingctl.store.records), one object per scenario.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal, Protocol

from pydantic import Field

from servingctl.schema.comparison import Comparison, SloCost
from servingctl.schema.results import (
    Calibration,
    DatasetFingerprint,
    RoundResult,
    RunConfig,
    RunMetadata,
    RunResult,
    ScenarioResult,
    ScenarioSummary,
    ServerSample,
    SweepResult,
)
from servingctl.store.models import _Record
from servingctl.store.records import RecordStore

Runner = Literal["lambda", "ecs"]


class RunStatus(StrEnum):
    """Where a benchmark run is: planned by the state machine, measuring, or finished."""

    PLANNED = "PLANNED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"  # POST /benchmarks/{run_id}/cancel: its execution stopped, nothing more written


# A run's workers write results only while it is RUNNING (a run that ended keeps what it had).
LIVE = frozenset({RunStatus.RUNNING})


class ResultRefused(Exception):
    """A conditional write of a benchmark run the store refused; nothing was written."""


class RunEnded(ResultRefused):
    """The run is not in a status the write expected (it ended, or ended already): its workers stop."""

    def __init__(self, run_id: str, status: RunStatus | None, wanted: Collection[RunStatus]) -> None:
        now = status.value if status is not None else "gone"
        super().__init__(f"benchmark run {run_id} is {now}, not {' or '.join(sorted(wanted))}: nothing written")
        self.run_id, self.status = run_id, status


class ResultExists(ResultRefused):
    """The result is already written (a retry or a duplicate worker): the first one stays."""

    def __init__(self, run_id: str, key: str) -> None:
        super().__init__(f"benchmark run {run_id}: {key} is already written (or changed since it was read); the stored one stays")
        self.run_id, self.key = run_id, key


class Reproducibility(_Record):
    """Everything needed to know what was measured and to measure it again the same way."""

    profile: str
    model: str = Field(description="served model name the requests carried")
    model_id: str = Field(description="model repository id")
    revision: str | None = Field(description="pinned model revision (commit), None when the registry has none")
    vllm_version: str | None
    image: str
    serving: dict[str, Any] = Field(description="the registry's serving options (vLLM flags as deployed)")
    pool: str
    instance_type: str
    gpu_count: int
    region: str
    engine: str = "servingctl"
    engine_version: str
    results_schema_version: int
    seed: int
    salt_mode: str
    calibrations: list[Calibration] = Field(default_factory=list, description="filled by the calibration step")
    dataset: DatasetFingerprint | None = Field(default=None, description="the user's prompts file the run sent (None: synthetic)")
    server_version: dict[str, Any] | None = Field(default=None, description="GET /version as the server answered")


class BenchmarkRun(_Record):
    """One benchmark run: what was asked, on what, and how it ended."""

    run_id: str
    profile: str
    status: RunStatus = RunStatus.PLANNED
    label: str | None = Field(default=None, description="free text, e.g. 'MTP on'")
    execution: str | None = Field(default=None, description="ARN of the run_benchmark execution")
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None
    request: dict[str, Any] = Field(description="the execution input as validated, defaults filled in")
    config: RunConfig
    metadata: RunMetadata | None = None
    reproducibility: Reproducibility
    scenarios: list[str] = Field(default_factory=list, description="planned scenario names, in run order")
    sweep: SweepResult | None = Field(default=None, description="the saturation sweep's search, once it stopped")
    slo_cost: SloCost | None = Field(default=None, description="cost per 1M output tokens at the SLO (compare step)")
    error: str | None = None


class Split(_Record):
    """A scenario measured by several workers at once because one worker was client-bound."""

    shards: int
    reasons: list[str] = Field(default_factory=list, description="why one worker was not enough")
    warnings: list[str] = Field(default_factory=list)


class StoredScenario(_Record):
    """One finished scenario: written as soon as it finishes, so a later failure loses nothing."""

    run_id: str
    name: str
    position: int = Field(description="index in the run's planned order")
    runner: Runner = "lambda"
    summary: ScenarioSummary
    calibration: Calibration
    t0_wall: datetime
    rounds: list[RoundResult] = Field(default_factory=list)
    server_timeline: list[ServerSample] = Field(default_factory=list, description="the server's /metrics about once a second")
    records_key: str = Field(description="where the per-request records are (RecordStore key)")
    records: int = Field(description="how many request records the object holds")
    split: Split | None = None
    written_at: datetime


class StoredComparison(_Record):
    """Self-hosted vs managed API for one scenario's measured throughput."""

    run_id: str
    scenario: str
    api: str = Field(description="managed API key in the price catalog")
    instance_type: str
    hourly_usd: float
    price_source: str
    comparison: Comparison
    written_at: datetime


class BenchmarkStore(Protocol):
    """Runs, scenario results and comparisons; each write is atomic for the item it touches."""

    def create_run(self, run: BenchmarkRun) -> BenchmarkRun:
        """Record a new run; creating the same run_id again returns the stored one unchanged."""
        ...

    def get_run(self, run_id: str) -> BenchmarkRun | None:
        """One run, None when absent."""
        ...

    def update_run(
        self, run_id: str, now: datetime, *, when: Collection[RunStatus] | None = None, **changes: Any
    ) -> BenchmarkRun:
        """Set the given fields of a run (KeyError when absent), only while its status is one of
        `when` if given (RunEnded otherwise, nothing written); returns the new record."""
        ...

    def list_runs(self, profile: str | None = None, limit: int = 50) -> list[BenchmarkRun]:
        """Runs newest first (run ids sort by creation time), optionally of one profile."""
        ...

    def put_scenario(self, scenario: StoredScenario, replacing: str | None = None) -> StoredScenario:
        """Write a finished scenario while its run is RUNNING (RunEnded otherwise): once (ResultExists
        when it is written already), or, with `replacing`, over the stored result whose records_key
        that is and nothing else (the shard merge over the single-worker result it read)."""
        ...

    def get_scenario(self, run_id: str, name: str) -> StoredScenario | None:
        """One scenario result, None when not written."""
        ...

    def list_scenarios(self, run_id: str) -> list[StoredScenario]:
        """The run's scenario results in run order."""
        ...

    def put_comparison(self, comparison: StoredComparison) -> StoredComparison:
        """Write one scenario's cost comparison once, while its run is RUNNING (ResultExists, RunEnded)."""
        ...

    def list_comparisons(self, run_id: str) -> list[StoredComparison]:
        """The run's cost comparisons, by scenario name."""
        ...


# Fields update_run may change (identity and creation are fixed).
RUN_MUTABLE_FIELDS = frozenset(BenchmarkRun.model_fields) - {"run_id", "profile", "created_at", "updated_at"}


def checked_run_changes(changes: dict[str, Any]) -> dict[str, Any]:
    """Refuse fields a caller may not set, so a typo cannot silently create an attribute."""
    unknown = set(changes) - RUN_MUTABLE_FIELDS
    if unknown:
        raise ValueError(f"unknown run field(s) {sorted(unknown)}; allowed: {sorted(RUN_MUTABLE_FIELDS)}")
    return changes


def apply_run_changes(run: BenchmarkRun, now: datetime, changes: dict[str, Any]) -> BenchmarkRun:
    """The run with changes applied and validated (nested models given as models or plain dicts)."""
    merged = run.model_dump() | checked_run_changes(changes) | {"updated_at": now}
    return BenchmarkRun.model_validate(merged)


def run_result(run: BenchmarkRun, store: BenchmarkStore, records: RecordStore | None = None) -> RunResult:
    """A stored run in the results schema (what results.json holds); per-request records are read
    from `records` when given, else left empty (summaries, rounds and calibrations are complete)."""
    scenarios = [
        ScenarioResult(
            summary=s.summary,
            calibration=s.calibration,
            t0_wall=s.t0_wall,
            rounds=s.rounds,
            server_timeline=s.server_timeline,
            records=records.get_records(s.records_key) if records is not None else [],
        )
        for s in store.list_scenarios(run.run_id)
    ]
    metadata = run.metadata or RunMetadata(
        run_id=run.run_id, client_version=run.reproducibility.engine_version, python_version="", started_at=run.created_at
    )
    result = RunResult(
        config=run.config,
        metadata=metadata,
        calibrations=run.reproducibility.calibrations,
        scenarios=scenarios,
        sweep=run.sweep,
        slo_cost=run.slo_cost,
        dataset=run.reproducibility.dataset,
    )
    result.failed_scenarios = [s.summary.name for s in scenarios if s.summary.failure_rate > run.config.max_failure_rate]
    return result
