"""The execution state of run_benchmark as models: what each bench_worker action answers (the
Payload), what each ResultPath keeps of it (its ResultSelector), and the three states the steps read:
the run's ($), a scenario's (an item of the RunScenarios Map) and a shard's (an item of RunShards).

tests/unit/control/test_state_contract.py ties them to statemachine/run_benchmark.asl.json as it ties
servingctl.control.state to the start and stop flows. servingctl.runs.worker validates each
action's input and answer through them at its boundary.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from servingctl.control.state import StepError
from servingctl.runs.matrix import PlannedScenario


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FlowCall(_Model):
    """A start_profile or stop_profile execution the run starts: its name and input."""

    name: str
    input: dict[str, Any]


class EcsPlan(_Model):
    """Where scenarios too long for Lambda run (the benchmark task definition and its network)."""

    cluster: str
    task_definition: str
    subnets: list[str]
    security_groups: list[str]
    container: str


class Planned(_Model):
    """plan's answer, kept whole at $.plan."""

    run_id: str
    profile: str
    phase: str
    ready: bool
    start: bool
    stop: bool
    start_execution: FlowCall
    stop_execution: FlowCall
    scenarios: list[PlannedScenario]
    sweep: bool
    ecs: EcsPlan | None


class CalibrationKept(_Model):
    """One input length's calibration as the state carries it."""

    target_tokens: int
    actual_tokens: int
    method: str


class Calibrated(_Model):
    """calibrate's answer, kept whole at $.calibration."""

    calibrations: list[CalibrationKept]


class ShardSpec(_Model):
    """One worker's share of a split scenario."""

    index: int
    count: int
    concurrency: int
    requests: int | None
    start_at: str


class ShardItem(_Model):
    """$ of a shard (an item of RunShards): what run_shard reads."""

    run_id: str
    scenario: PlannedScenario
    shard: ShardSpec
    error: StepError | None = None


class ScenarioAnswer(_Model):
    """run_scenario's answer (the worker's metrics and logs read all of it)."""

    name: str
    output_tok_s: float | None
    ok: int
    failed: int
    client_bound: bool
    generation_tokens_equal: bool | None
    split: bool
    shards: list[ShardItem]


class ScenarioKept(_Model):
    """$.result of a scenario run on Lambda: what the scenario's flow reads next."""

    name: str
    output_tok_s: float | None
    client_bound: bool
    split: bool
    shards: list[ShardItem]


class SweepScenarioKept(_Model):
    """$.sweep_result: the sweep's latest scenario."""

    name: str
    output_tok_s: float | None
    client_bound: bool


class SnapshotKept(_Model):
    """The server's counters before a shard's load."""

    totals: dict[str, float]
    unavailable: str | None


class ShardAnswer(_Model):
    """run_shard's answer, which replaces the shard's state ($) whole."""

    index: int
    concurrency: int
    t0_wall: str
    records_key: str
    before: SnapshotKept
    peak_running: int | None
    running_samples: int
    client: dict[str, Any]
    late_start_s: float
    server_timeline: list[dict[str, Any]]


class MergedAnswer(_Model):
    """merge_shards's answer."""

    name: str
    output_tok_s: float | None
    ok: int
    failed: int
    client_bound: bool
    generation_tokens_equal: bool | None
    shards: int


class MergedKept(_Model):
    """$.merged: the merged scenario."""

    name: str
    output_tok_s: float | None
    shards: int
    generation_tokens_equal: bool | None


class SweepNext(_Model):
    """sweep_next's answer, kept whole at $.sweep: the next concurrency (None: the sweep stops)."""

    next: int | None
    scenario: PlannedScenario | None
    found: int | None
    stop: str | None
    reason: str
    steps: int


class ComparedScenario(_Model):
    """One scenario's self-hosted cost over the managed API's."""

    scenario: str
    ratio_self_hosted_to_api: float


class Compared(_Model):
    """compare's answer, kept whole at $.compare."""

    compared: list[ComparedScenario]
    skipped: str | None


class Finished(_Model):
    """finish's answer."""

    run_id: str
    status: str
    scenarios_written: list[str]
    error: str | None


class FinishKept(_Model):
    """$.finish: how the run ended, why it failed (FailRequests' cause) and the scenarios written."""

    status: str
    scenarios_written: list[str]
    error: str | None


class StopFailureKept(_Model):
    """$.finish when the run's stop failed (RecordStopFailure): how the run ended."""

    status: str


class ChildExecution(_Model):
    """$.started, $.stopped: the start or stop execution run to its end (startExecution.sync)."""

    execution_arn: str
    status: str


class EcsRun(_Model):
    """$.result of a scenario run on ECS (runTask.sync): the task and why it stopped."""

    task_arn: str
    stopped_reason: str | None


class EcsEvent(_Model):
    """$.event: the run_scenario event the ECS task runs (BuildEcsEvent)."""

    action: str
    state: dict[str, Any]
    execution: str
    attempt: dict[str, Any]


class ScenarioItem(_Model):
    """$ of one scenario (an item of RunScenarios)."""

    run_id: str
    scenario: PlannedScenario
    ecs: EcsPlan | None
    execution: str
    result: ScenarioKept | EcsRun | None = None
    shard_results: list[ShardAnswer] | None = None
    merged: MergedKept | None = None
    event: EcsEvent | None = None
    error: StepError | None = None


class ScenarioDone(_Model):
    """What a scenario's flow ends with (an item of $.results)."""

    name: str


class RunState(BaseModel):
    """$ of run_benchmark. The execution input's own fields pass through as extra fields: plan
    validates them (InvalidInput naming each)."""

    model_config = ConfigDict(extra="allow")

    plan: Planned | None = None
    started: ChildExecution | None = None
    calibration: Calibrated | None = None
    results: list[ScenarioDone] | None = None
    # The input's own `sweep` flag (true: a saturation sweep) is here until SweepNext writes its
    # answer over it; plan has read it by then ($.plan.sweep is what the flow branches on).
    sweep: SweepNext | bool | None = None
    sweep_result: SweepScenarioKept | None = None
    compare: Compared | None = None
    stopped: ChildExecution | None = None
    finish: FinishKept | StopFailureKept | None = None
    error: StepError | None = None
    finish_error: StepError | None = None
    stop_error: StepError | None = None


class ScenarioStep(BaseModel):
    """What run_scenario reads of whichever state it runs on (a scenario item, the sweep's, the ECS
    task's event): the run and the scenario."""

    model_config = ConfigDict(extra="ignore")

    run_id: str
    scenario: PlannedScenario


class MergeStep(_Model):
    """What merge_shards reads: the run, the scenario and its shards' answers."""

    run_id: str
    scenario: PlannedScenario
    shards: list[ShardAnswer]
