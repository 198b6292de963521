"""sweep Lambda: the auto-shutdown sweep, run by an EventBridge Scheduler schedule every 5 minutes.

Event (the schedule's input): {"dry_run": false} (dry_run true reports without stopping; "poll"
optionally paces the stop executions it starts). Env: SERVINGCTL_REGISTRY, SERVINGCTL_TABLE,
STOP_STATE_MACHINE_ARN, POWERTOOLS_SERVICE_NAME, POWERTOOLS_METRICS_NAMESPACE.
"""

from __future__ import annotations

import os
from typing import Any

import boto3
import httpx
from aws_lambda_powertools import Logger, Metrics, Tracer, single_metric
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from servingctl.control.autostop import GAUGE_TIMEOUT_S, SweepDeps, SweepInput, sweep
from servingctl.control.clock import Clock, SystemClock
from servingctl.control.settings import parse_input
from servingctl.registry import load_registry
from servingctl.store import DynamoStore
from servingctl.tracing import PATCH_MODULES

logger = Logger()
tracer = Tracer(patch_modules=PATCH_MODULES)
metrics = Metrics()
_clients: dict[str, Any] = {}
# The sweep's clock; the twin's tests move it forward to let a lease run out.
CLOCK: Clock = SystemClock()


def _deps() -> SweepDeps:
    """Clients and the store are built once per container; the registry is cached by its loader."""
    if not _clients:
        _clients.update(sfn=boto3.client("stepfunctions"), cloudwatch=boto3.client("cloudwatch"), events=boto3.client("events"))
        _clients["store"] = DynamoStore(os.environ["SERVINGCTL_TABLE"])
        # Who did it: the stops the sweep starts carry its own role's ARN (GetCallerIdentity needs no permission).
        _clients["identity"] = boto3.client("sts").get_caller_identity()["Arn"]
        _clients["http"] = httpx.Client(timeout=GAUGE_TIMEOUT_S)
    return SweepDeps(**_clients, registry=load_registry(), stop_machine_arn=os.environ["STOP_STATE_MACHINE_ARN"], clock=CLOCK)


@metrics.log_metrics
@tracer.capture_lambda_handler
@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Decide for every READY profile, log and count each decision, and answer with them all."""
    request = parse_input(SweepInput, event if event is not None else {})
    outcomes = sweep(_deps(), dry_run=request.dry_run, poll=request.poll)
    for outcome in outcomes:
        logger.info("sweep decision", extra=outcome.model_dump() | {"dry_run": request.dry_run})
        # One metric per decision with its reason as the dimension (idle, lease-expired, in-use, ...).
        with single_metric(name="SweepDecisions", unit=MetricUnit.Count, value=1,
                           namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "servingctl")) as metric:
            metric.add_dimension(name="reason", value=outcome.reason)
            metric.add_dimension(name="dry_run", value=str(request.dry_run).lower())
    metrics.add_metric(name="SweptProfiles", unit=MetricUnit.Count, value=len(outcomes))
    return {"dry_run": request.dry_run, "decisions": [o.model_dump(mode="json") for o in outcomes]}
