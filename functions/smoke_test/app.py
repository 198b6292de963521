"""smoke_test Lambda (in the VPC): GET /health and /v1/models through the internal ALB.

Event (the lambda:invoke Payload): {"action": "smoke_test", "state": <execution state>, "execution": <ARN>};
the target comes from $.config.smoke, so this function needs neither the registry nor the table.
"""

from __future__ import annotations

from typing import Any

import httpx
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from servingctl.control.smoke import smoke_test
from servingctl.control.state import StartState, parse_state
from servingctl.shared.errors import InvalidInput
from servingctl.shared.flow_inputs import SmokeTarget
from servingctl.tracing import PATCH_MODULES

logger = Logger()
tracer = Tracer(patch_modules=PATCH_MODULES)
metrics = Metrics()

_http = httpx.Client(follow_redirects=False)


def _target(event: Any) -> SmokeTarget:
    if not isinstance(event, dict) or event.get("action") != "smoke_test":
        raise InvalidInput("action: expected 'smoke_test'; allowed: smoke_test")
    config = parse_state(StartState, event.get("state")).config
    if config is None:
        raise InvalidInput("state.config.smoke: missing; prepare_start puts the target there")
    return config.smoke


@metrics.log_metrics
@tracer.capture_lambda_handler
@logger.inject_lambda_context(correlation_id_path="execution")
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Run the smoke test; SmokeTestFailed (the ASL retries it twice) says what was wrong."""
    target = _target(event)
    logger.append_keys(profile=target.header_value, url=target.url)
    try:
        result = smoke_test(target, _http)
    except Exception:
        metrics.add_metric(name="SmokeTestFailed", unit=MetricUnit.Count, value=1)
        raise
    logger.info("smoke test passed", extra={"models": result.models})
    return result.model_dump(mode="json")
