"""waker Lambda: the ALB Lambda target a wake-on-request profile's listener rule forwards to while the
profile is not READY (logic in servingctl.api.waker).

Event: an ALB Lambda target event (httpMethod, path, headers, body, isBase64Encoded,
requestContext.elb.targetGroupArn). Env: WakerSettings (servingctl.shared.environment), read once at
cold start; SERVINGCTL_START_POLL (optional, JSON) paces the starts it makes (the local twin sets it
to its scaled clock; unset, start_profile's defaults apply).
"""

from __future__ import annotations

import threading
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.data_classes import ALBEvent, event_source
from aws_lambda_powertools.utilities.typing import LambdaContext

from servingctl.api.models import StartRequest
from servingctl.api.service import ApiDeps
from servingctl.api.waker import wake
from servingctl.control.known import known
from servingctl.costs import load_catalog
from servingctl.shared.environment import WakerSettings
from servingctl.store import DynamoStore
from servingctl.tracing import PATCH_MODULES

logger = Logger()
tracer = Tracer(patch_modules=PATCH_MODULES)
SETTINGS = WakerSettings.from_env()  # at cold start: a missing variable fails the Init phase
_clients: dict[str, Any] = {}
_init_lock = threading.Lock()


def _deps() -> ApiDeps:
    """Clients, store and catalog once per container; the registry as its loader caches it."""
    with _init_lock:
        if not _clients:
            # The waker reads the store and starts a flow: no ECS, Auto Scaling or ELB client.
            built: dict[str, Any] = {"ecs": None, "autoscaling": None, "elbv2": None, "sfn": boto3.client("stepfunctions")}
            built["store"] = DynamoStore(SETTINGS.table)
            built["catalog"] = load_catalog()
            _clients.update(built)
    found = known(_clients["store"], SETTINGS.registry, SETTINGS.region)
    return ApiDeps(
        **_clients,
        registry=found.registry,
        retired=found.retired,
        start_machine_arn=SETTINGS.start_machine_arn,
        stop_machine_arn=SETTINGS.stop_machine_arn,
    )


def _start_request() -> StartRequest:
    """The start a wake asks for: start_profile's defaults, paced by SERVINGCTL_START_POLL when set."""
    return StartRequest(poll=SETTINGS.start_poll) if SETTINGS.start_poll else StartRequest()


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@event_source(data_class=ALBEvent)
def lambda_handler(event: ALBEvent, context: LambdaContext) -> dict[str, Any]:
    """Answer the request (503 with Retry-After while the profile wakes) as the ALB expects it."""
    answer = wake(_deps(), dict(event.headers), _start_request())
    logger.info("answered", extra={"status": answer.status, "code": answer.code, "retry_after_s": answer.retry_after_s})
    return answer.to_alb()
