"""Orchestration: a sweep over input lengths x concurrencies, one scenario at a time.

`run_benchmark` fetches server metadata, calibrates each input length once and runs the scenarios
in order (never two at once). `run_scenario` runs exactly one scenario with a calibration passed
in: the unit of work of the Lambda benchmark worker. `measure_scenario` is its load half, also
used for one shard of a scenario split across workers (the merge then judges the whole). Request failures never
abort anything: they
are recorded per request and counted in the summaries.
"""

from __future__ import annotations

import platform
import socket
import uuid
from dataclasses import replace
from datetime import UTC, datetime

import httpx

import servingctl
from servingctl.loadgen.backend import Backend, Connection
from servingctl.loadgen.calibration import calibrate
from servingctl.loadgen.datasets import Dataset, check_usable, load_dataset
from servingctl.loadgen.host import client_host, load_average
from servingctl.loadgen.measure import (
    Measurement,
    Progress,
    ProgressFn,
    measure_scenario,
)
from servingctl.loadgen.metrics import scenario_summary
from servingctl.loadgen.selfcheck import CPU_SHARE_LIMIT, LAG_P99_LIMIT_MS
from servingctl.loadgen.server_metrics import build_checks
from servingctl.loadgen.spread import spread_count, spread_scenario
from servingctl.loadgen.workload import Workload, dataset_workload, distribution_workload
from servingctl.schema.results import (
    Calibration,
    DatasetFingerprint,
    RunConfig,
    RunMetadata,
    RunResult,
    ScenarioResult,
)


# The server's counters are updated when it processes outputs, possibly just after the client saw
# the stream end: re-read them a few times before judging a difference.
def new_run_id() -> str:
    """A sortable, unique run id: UTC time plus random hex."""
    return f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


def connection_for(config: RunConfig, api_key: str | None = None, headers: dict[str, str] | None = None) -> Connection:
    """The connection for a config; `headers` carries real values of headers the config redacts."""
    return Connection(
        endpoint=config.endpoint,
        api_key=api_key,
        headers=headers if headers is not None else config.headers,
        timeout_s=config.timeout_s,
    )


def summarize_measurement(
    config: RunConfig, calibration: Calibration, m: Measurement, *, progress: ProgressFn | None = None
) -> ScenarioResult:
    """Checks against the server's counters and the scenario summary of one measurement."""
    checks = build_checks(
        m.before,
        m.after,
        client_completion_tokens=sum(r.completion_tokens or 0 for r in m.records),
        client_prompt_tokens=sum(r.prompt_tokens or 0 for r in m.records),
        salted=config.salt_mode != "none" and not m.prefix_reuse,
        peak_running=m.peak_running,
        running_samples=m.running_samples,
        intended_concurrency=m.concurrency,
        exact_peak=config.mode != "rate" and config.replay_speed is None,
    )
    summary = scenario_summary(
        name=m.name,
        config=config,
        calibration=calibration,
        concurrency=m.concurrency,
        records=m.records,
        rounds=m.rounds,
        server=checks,
        client=m.client,
    )
    if progress is not None:
        progress(
            Progress("scenario_finished", m.name, len(m.records), len(m.records), f"{summary.ok} ok, {summary.failed} failed")
        )
    return ScenarioResult(
        summary=summary,
        calibration=calibration,
        t0_wall=m.t0_wall,
        rounds=m.rounds,
        records=m.records,
        server_timeline=m.server_timeline,
    )


async def run_scenario(
    config: RunConfig,
    connection: Connection,
    calibration: Calibration,
    concurrency: int,
    *,
    run_id: str,
    lag_p99_limit_ms: float = LAG_P99_LIMIT_MS,
    cpu_share_limit: float = CPU_SHARE_LIMIT,
    progress: ProgressFn | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    processes: int = 1,
    workload: Workload | None = None,
) -> ScenarioResult:
    """Run one scenario (warm-ups, measured load, checks) and return its result; with processes > 1
    its streams (and a workload's requests) are spread over that many processes of this host
    (loadgen/spread.py)."""
    if spread_count(config, concurrency, processes, workload) > 1:  # one stream cannot be spread
        return await spread_scenario(
            config,
            connection,
            calibration,
            concurrency,
            processes=processes,
            run_id=run_id,
            lag_p99_limit_ms=lag_p99_limit_ms,
            cpu_share_limit=cpu_share_limit,
            progress=progress,
            workload=workload,
        )
    measurement = await measure_scenario(
        config,
        connection,
        calibration,
        concurrency,
        run_id=run_id,
        lag_p99_limit_ms=lag_p99_limit_ms,
        cpu_share_limit=cpu_share_limit,
        progress=progress,
        transport=transport,
        workload=workload,
    )
    return summarize_measurement(config, calibration, measurement, progress=progress)


async def fetch_metadata(backend: Backend, run_id: str) -> RunMetadata:
    """Client and server identity: /version and /v1/models as the server answers them."""
    return RunMetadata(
        run_id=run_id,
        client_version=servingctl.__version__,
        python_version=platform.python_version(),
        hostname=socket.gethostname(),
        client_host=client_host(),
        server_version=await backend.get_json("/version"),
        server_models=await backend.get_json("/v1/models"),
        started_at=datetime.now(UTC),
    )


async def prepare(
    config: RunConfig,
    connection: Connection,
    *,
    run_id: str,
    progress: ProgressFn | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> tuple[RunMetadata, list[Calibration]]:
    """Server metadata and one calibration per input length (the sweep's first step)."""
    notify = progress or (lambda event: None)
    async with Backend(connection, config.model, max_connections=2, transport=transport, api=config.api) as backend:
        metadata = await fetch_metadata(backend, run_id)
        calibrations = []
        varying = config.dataset is not None or config.input_distribution is not None  # no fixed lengths to calibrate
        for target in [] if varying else config.input_tokens:
            calibration = await calibrate(backend, target, config.salt_mode, config.seed)
            calibrations.append(calibration)
            notify(
                Progress(
                    "calibrated", None, 0, None, f"input {target}: {calibration.actual_tokens} tokens ({calibration.method})"
                )
            )
    return metadata, calibrations


async def prepare_workloads(
    config: RunConfig,
    connection: Connection,
    calibrations: list[Calibration],
    *,
    dataset: Dataset | None = None,
    progress: ProgressFn | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> tuple[list[Workload | None], DatasetFingerprint | None]:
    """The prompts of each input length (None: the calibrated prompt at max_tokens, as without a
    workload), or the one workload of the `dataset` (read from config.dataset when not given) or
    input distribution, with the dataset's fingerprint."""
    notify = progress or (lambda event: None)
    if config.dataset is None and config.input_distribution is None and config.output_distribution is None:
        return [None] * len(calibrations), None
    async with Backend(connection, config.model, max_connections=8, transport=transport, api=config.api) as backend:
        if config.dataset is not None:
            dataset = dataset or load_dataset(config.dataset)
            check_usable(dataset, api=config.api, mode=config.mode, replay=config.replay_speed is not None)
            workload = await dataset_workload(backend, dataset, config)
            if config.replay_speed is not None:  # sent in the order of their timestamps
                workload = replace(workload, prompts=sorted(workload.prompts, key=lambda p: p.timestamp_s or 0.0))
            fingerprint = dataset.fingerprint
            notify(
                Progress(
                    "calibrated",
                    None,
                    0,
                    None,
                    f"dataset {fingerprint.source} ({fingerprint.format}, sha256 {fingerprint.sha256[:12]}): "
                    f"{fingerprint.prompts} prompts, mean {workload.calibration.actual_tokens} prompt tokens",
                )
            )
            return [workload], fingerprint
        if config.input_distribution is not None:
            workload = await distribution_workload(backend, config)
            notify(
                Progress("calibrated", None, 0, None, f"input {config.input_distribution.label()}: {len(workload.prompts)} drawn")
            )
            return [workload], None
        return [await distribution_workload(backend, config, fixed=c) for c in calibrations], None


def failed_scenarios(run: RunResult) -> list[str]:
    """Scenarios whose failure rate exceeds the run's max_failure_rate."""
    return [s.summary.name for s in run.scenarios if s.summary.failure_rate > run.config.max_failure_rate]


async def begin_run(
    config: RunConfig,
    *,
    api_key: str | None,
    headers: dict[str, str] | None,
    progress: ProgressFn | None,
    run_id: str | None,
    transport: httpx.AsyncBaseTransport | None,
) -> tuple[RunResult, Connection, str]:
    """Open a run from this machine: its id, its connection, and the run record with metadata and calibrations."""
    run_id = run_id or new_run_id()
    connection = connection_for(config, api_key, headers)
    metadata, calibrations = await prepare(config, connection, run_id=run_id, progress=progress, transport=transport)
    return RunResult(config=config, metadata=metadata, calibrations=calibrations), connection, run_id


async def run_benchmark(
    config: RunConfig,
    *,
    api_key: str | None = None,
    headers: dict[str, str] | None = None,
    progress: ProgressFn | None = None,
    run_id: str | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    processes: int = 1,
) -> RunResult:
    """Run the whole sweep (input lengths x concurrencies, or concurrencies over a dataset's or a
    distribution's prompts) and return the results. A dataset is read before anything is sent
    (DatasetError names the line and field)."""
    dataset = load_dataset(config.dataset) if config.dataset is not None else None
    run, connection, run_id = await begin_run(
        config, api_key=api_key, headers=headers, progress=progress, run_id=run_id, transport=transport
    )
    workloads, run.dataset = await prepare_workloads(
        config, connection, run.calibrations, dataset=dataset, progress=progress, transport=transport
    )
    if config.dataset is not None or config.input_distribution is not None:
        run.calibrations = [w.calibration for w in workloads if w is not None]
    # A rate sweep runs each rate as a scenario of its own, with that rate in its config.
    per_rate = [config.model_copy(update={"rate": rate}) for rate in config.rates] if config.rates else [config]
    for workload, calibration in zip(workloads, run.calibrations, strict=True):
        for concurrency, scenario_config in ((c, sc) for c in config.concurrencies for sc in per_rate):
            result = await run_scenario(
                scenario_config,
                connection,
                calibration,
                concurrency,
                run_id=run_id,
                progress=progress,
                transport=transport,
                processes=processes,
                workload=workload,
            )
            run.scenarios.append(result)
    return finish_run(run)


def finish_run(run: RunResult) -> RunResult:
    """Close a run: its failed scenarios, the end time and the client host's load at the end."""
    run.failed_scenarios = failed_scenarios(run)
    run.metadata.finished_at = datetime.now(UTC)
    if run.metadata.client_host is not None:
        run.metadata.client_host.load_average_end = load_average()
    return run
