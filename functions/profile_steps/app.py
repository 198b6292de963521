"""profile_steps Lambda: every AWS-API step of start_profile / stop_profile, dispatched on event["action"].

Event (the lambda:invoke Payload): {"action": "<step>", "state": <execution state>, "execution": <ARN>}.
Env: ProfileStepsSettings (servingctl.shared.environment), POWERTOOLS_SERVICE_NAME, POWERTOOLS_METRICS_NAMESPACE.
"""

from __future__ import annotations

from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from servingctl.control import events
from servingctl.control.deps import Deps
from servingctl.control.known import known
from servingctl.control.steps import lifecycle_event, run_step, step_metrics, step_profile
from servingctl.shared.environment import ProfileStepsSettings
from servingctl.store import DynamoStore
from servingctl.tracing import PATCH_MODULES

SETTINGS = ProfileStepsSettings.from_env()  # at cold start: a missing variable fails the Init phase
logger = Logger()
tracer = Tracer(patch_modules=PATCH_MODULES)
metrics = Metrics()

# Seconds kept free of a check's in-invocation watch, for the answer and Lambda's own overhead.
WATCH_MARGIN_S = 15.0
_clients: dict[str, Any] = {}
_publishers: dict[str, Any] = {}


def _deps(context: LambdaContext) -> Deps:
    """Clients and the store are built once per container; the registry (cached by its loader) is
    what parses of it plus the copies the records keep: a stop never depends on it whole."""
    if not _clients:
        _clients.update({name: boto3.client(name) for name in ("ecs", "autoscaling", "elbv2", "ec2", "stepfunctions", "logs")})
        _clients["appautoscaling"] = boto3.client("application-autoscaling")
        _clients["store"] = DynamoStore(SETTINGS.table)
    found = known(_clients["store"], SETTINGS.registry, SETTINGS.region)
    return Deps(
        **_clients,
        registry=found.registry,
        retired=found.retired,
        watch_budget_s=max(0.0, context.get_remaining_time_in_millis() / 1000 - WATCH_MARGIN_S),
    )


@metrics.log_metrics
@tracer.capture_lambda_handler
@logger.inject_lambda_context(correlation_id_path="execution")
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Run one step and return its JSON-safe result; a raised error's class name is the ASL error."""
    action = event.get("action") if isinstance(event, dict) else None
    logger.append_keys(action=action, profile=step_profile(event))
    tracer.put_annotation(key="action", value=str(action))
    try:
        result = run_step(event, _deps(context))
    except Exception as exc:
        logger.warning("step failed", extra={"error": type(exc).__name__, "reason": str(exc)})
        raise
    logger.info("step done", extra={"result": result})
    for name, unit, value in step_metrics(str(action), result):
        metrics.add_metric(name=name, unit=MetricUnit(unit), value=value)
    announced = lifecycle_event(event, result)
    if announced:
        if "events" not in _publishers:
            _publishers["events"] = boto3.client("events")
        events.publish(_publishers["events"], *announced)
    return result
