"""bench_worker Lambda (in the VPC): every run_benchmark step that talks to the model server or to
benchmark storage, dispatched on event["action"] (servingctl.runs.worker lists them).

Event (the lambda:invoke Payload): {"action": "<step>", "state": <state>, "execution": <ARN>}.
Env: BenchWorkerSettings (servingctl.shared.environment), POWERTOOLS_SERVICE_NAME,
POWERTOOLS_METRICS_NAMESPACE.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from servingctl.registry import load_registry
from servingctl.runs.worker import WorkerDeps, deps_from_settings, run_action
from servingctl.shared.environment import BenchWorkerSettings
from servingctl.tracing import PATCH_MODULES

SETTINGS = BenchWorkerSettings.from_env()  # at cold start: a missing variable fails the Init phase
logger = Logger()
tracer = Tracer(patch_modules=PATCH_MODULES)
metrics = Metrics()

_deps: list[WorkerDeps] = []


def _emit(action: str, result: dict[str, Any]) -> None:
    if action in ("run_scenario", "merge_shards"):
        metrics.add_metric(name="ScenariosWritten", unit=MetricUnit.Count, value=1)
        if result.get("client_bound"):
            metrics.add_metric(name="ScenariosClientBound", unit=MetricUnit.Count, value=1)
    elif action == "finish":
        metrics.add_metric(name=f"Runs{result['status'].capitalize()}", unit=MetricUnit.Count, value=1)


@metrics.log_metrics
@tracer.capture_lambda_handler
@logger.inject_lambda_context(correlation_id_path="execution")
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Run one step and return its JSON-safe result; a raised error's class name is the ASL error."""
    if not _deps:  # clients are built once per container
        _deps.append(deps_from_settings(SETTINGS))
    deps = replace(
        _deps[0], registry=load_registry(SETTINGS.registry, SETTINGS.region)
    )  # the loader caches the registry for a minute
    action = event.get("action") if isinstance(event, dict) else None
    logger.append_keys(action=action)
    try:
        result = run_action(event, deps)
    except Exception as exc:
        logger.warning("step failed", extra={"error": type(exc).__name__, "reason": str(exc)})
        raise
    logger.info("step done", extra={"result": result})
    _emit(str(action), result)
    return result
