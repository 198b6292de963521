"""sweep Lambda: the reconciler and the auto-shutdown sweep, run by an EventBridge Scheduler schedule
every 5 minutes, and the reconciler alone on a start/stop/run_benchmark execution that ended
ABORTED, TIMED_OUT or FAILED (EventBridge's "Step Functions Execution Status Change").

Both first end the benchmark runs whose run_benchmark execution died without recording it (the
run FAILED, its hold released, its profile stopped when the run asked for a stop:
servingctl.runs.ended); a dry run leaves them alone.

Scheduled event: {"dry_run": false} (dry_run true reports without stopping; "poll" optionally
paces the stop executions the auto-stop starts). Env: SweepSettings (servingctl.shared.environment;
its SERVINGCTL_STOP_POLL, optional JSON, paces the stops it starts when the event gives none: the
local twin sets it to its scaled clock; unset, stop_profile's defaults apply), POWERTOOLS_SERVICE_NAME.
"""

from __future__ import annotations

from typing import Any

import boto3
import httpx
from aws_lambda_powertools import Logger, Metrics, Tracer, single_metric
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import BotoCoreError, ClientError

from servingctl.control.autostop import GAUGE_TIMEOUT_S, SweepDeps, SweepInput, sweep
from servingctl.control.deps import Deps
from servingctl.control.known import Known, merge
from servingctl.control.reconcile import STATUS_CHANGE, ReconcileDeps, Repair, on_status_change, reconcile, undescribed_capacity
from servingctl.control.tags import TaggedCapacity, tagged_capacity
from servingctl.registry import read_registry
from servingctl.runs.ended import EndDeps, end_dead_runs
from servingctl.shared.clock import Clock, SystemClock
from servingctl.shared.environment import SweepSettings
from servingctl.shared.flow_inputs import Poll, parse_input
from servingctl.store import DynamoStore
from servingctl.store.benchmarks_dynamodb import DynamoBenchmarkStore
from servingctl.tracing import PATCH_MODULES

SETTINGS = SweepSettings.from_env()  # at cold start: a missing variable fails the Init phase
logger = Logger()
tracer = Tracer(patch_modules=PATCH_MODULES)
metrics = Metrics()
_clients: dict[str, Any] = {}
# The sweep's clock; the twin's tests move it forward to let a lease run out.
CLOCK: Clock = SystemClock()


def _client(name: str) -> Any:
    """Clients and the store are built once per container."""
    if not _clients:
        _clients.update({s: boto3.client(s) for s in ("stepfunctions", "cloudwatch", "events", "ecs", "autoscaling", "elbv2")})
        _clients["store"] = DynamoStore(SETTINGS.table)
        _clients["runs"] = DynamoBenchmarkStore(SETTINGS.table)
        # Who did it: the stops the sweep starts carry its own role's ARN (GetCallerIdentity needs no permission).
        _clients["identity"] = boto3.client("sts").get_caller_identity()["Arn"]
        _clients["http"] = httpx.Client(timeout=GAUGE_TIMEOUT_S)
    return _clients[name]


def _known() -> tuple[Known, TaggedCapacity | None]:
    """The registry as published (what parses; the loader caches it) with the copies the records
    keep, and the capacity found by its tags (None when it could not be read: logged, counted)."""
    store = _client("store")
    published = read_registry(SETTINGS.registry, SETTINGS.region)
    for problem in published.problems:
        logger.error("registry parameter unusable", extra={"parameter": problem.parameter, "problem": problem.detail})
    found = merge(published, store)
    try:
        tagged = tagged_capacity(_client("ecs"), _client("autoscaling"), {p.cluster for p in found.registry.profiles.values()})
    except (ClientError, BotoCoreError):
        logger.exception("capacity by tags could not be read")
        return found, None
    if set(tagged.profiles) - set(found.registry.profiles):
        found = merge(published, store, running=tagged.profiles)
    return found, tagged


def _sweep_deps(known: Known) -> SweepDeps:
    """The auto-stop's collaborators."""
    return SweepDeps(
        sfn=_client("stepfunctions"),
        cloudwatch=_client("cloudwatch"),
        events=_client("events"),
        elbv2=_client("elbv2"),
        autoscaling=_client("autoscaling"),
        store=_client("store"),
        registry=known.registry,
        stop_machine_arn=SETTINGS.stop_machine_arn,
        clock=CLOCK,
        identity=_client("identity"),
        http=_client("http"),
    )


def _reconcile_deps(known: Known) -> ReconcileDeps:
    """The reconciler's collaborators (it reads ECS and Auto Scaling, never scales them itself)."""
    steps = Deps(
        ecs=_client("ecs"),
        autoscaling=_client("autoscaling"),
        elbv2=None,
        ec2=None,
        stepfunctions=_client("stepfunctions"),
        store=_client("store"),
        registry=known.registry,
        clock=CLOCK,
        retired=known.retired,
    )
    machines = {"start": SETTINGS.start_machine_arn, "stop": SETTINGS.stop_machine_arn}
    return ReconcileDeps(
        steps=steps,
        sfn=_client("stepfunctions"),
        events=_client("events"),
        machines=machines,
        identity=_client("identity"),
        known=known,
    )


def _end_runs(execution_arn: str | None, poll: Poll | None) -> list[dict[str, Any]]:
    """End the dead benchmark runs (of one execution, or all recent ones), logged and counted."""
    deps = EndDeps(
        runs=_client("runs"),
        profiles=_client("store"),
        sfn=_client("stepfunctions"),
        stop_machine_arn=SETTINGS.stop_machine_arn,
        clock=CLOCK,
        identity=_client("identity"),
    )
    ended = end_dead_runs(deps, execution_arn, poll)
    for run in ended:
        logger.info("benchmark run ended by the sweep", extra=run.model_dump())
        _count("BenchmarkRunsEnded", run.action, False)
    return [run.model_dump(mode="json") for run in ended]


def _count(name: str, reason: str, dry_run: bool) -> None:
    """One metric per decision with its reason as the dimension (idle, lease-expired, phase-stuck, ...)."""
    with single_metric(name=name, unit=MetricUnit.Count, value=1, namespace=SETTINGS.metrics_namespace) as metric:
        metric.add_dimension(name="reason", value=reason)
        metric.add_dimension(name="dry_run", value=str(dry_run).lower())


def _report(repairs: list[Repair], dry_run: bool) -> None:
    for repair in repairs:
        logger.info("reconcile decision", extra=repair.model_dump() | {"dry_run": dry_run})
        _count("Reconciled", repair.reason, dry_run)


@metrics.log_metrics
@tracer.capture_lambda_handler
@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Reconcile (every profile, or the one a status change is about), then decide for every READY
    profile; log and count each decision, count the profiles that raised (SweepErrors), answer with all."""
    if isinstance(event, dict) and event.get("detail-type") == STATUS_CHANGE:
        known, _ = _known()
        detail = event.get("detail") or {}
        runs = []
        if SETTINGS.bench_machine_arn and detail.get("stateMachineArn") == SETTINGS.bench_machine_arn:
            runs = _end_runs(str(detail.get("executionArn")), SETTINGS.stop_poll)
        repairs = on_status_change(_reconcile_deps(known), event, poll=SETTINGS.stop_poll)
        _report(repairs, False)
        errors = sum(r.action == "error" for r in repairs) + sum(r["action"] == "error" for r in runs)
        metrics.add_metric(name="SweepErrors", unit=MetricUnit.Count, value=errors)
        return {"trigger": "status-change", "runs_ended": runs, "repairs": [r.model_dump(mode="json") for r in repairs]}
    request = parse_input(SweepInput, event if event is not None else {})
    poll = request.poll or SETTINGS.stop_poll
    runs = [] if request.dry_run else _end_runs(None, poll)
    known, tagged = _known()
    repairs = reconcile(_reconcile_deps(known), dry_run=request.dry_run, poll=poll)
    if tagged is None:
        repairs.append(
            Repair(
                profile="*",
                stop=False,
                reason="error",
                action="error",
                detail="capacity by tags (servingctl:profile, servingctl:pool) could not be read",
            )
        )
    else:
        repairs += undescribed_capacity(known.registry, tagged)
    # A registry parameter that does not parse is an error of every sweep until it is fixed.
    repairs += [
        Repair(profile=p.parameter, stop=False, reason="error", action="error", detail=f"registry: {p.detail}")
        for p in known.published.problems
    ]
    _report(repairs, request.dry_run)
    outcomes = sweep(_sweep_deps(known), dry_run=request.dry_run, poll=poll)
    for outcome in outcomes:
        logger.info("sweep decision", extra=outcome.model_dump() | {"dry_run": request.dry_run})
        _count("SweepDecisions", outcome.reason, request.dry_run)
    metrics.add_metric(name="SweptProfiles", unit=MetricUnit.Count, value=len(outcomes))
    errors = (
        sum(r.action == "error" for r in repairs)
        + sum(o.action == "error" for o in outcomes)
        + sum(r["action"] == "error" for r in runs)
    )
    # Always published (0 included), so the SweepErrors alarm sees a datapoint per sweep.
    metrics.add_metric(name="SweepErrors", unit=MetricUnit.Count, value=errors)
    return {
        "dry_run": request.dry_run,
        "runs_ended": runs,
        "repairs": [r.model_dump(mode="json") for r in repairs],
        "decisions": [o.model_dump(mode="json") for o in outcomes],
    }
