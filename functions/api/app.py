"""api Lambda: the REST API behind API Gateway (IAM auth); routes in servingctl.api.routes.

Event: an API Gateway REST proxy event. Env: ApiSettings (servingctl.shared.environment),
POWERTOOLS_SERVICE_NAME.
"""

from __future__ import annotations

import threading
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.event_handler import APIGatewayRestResolver
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer
from aws_lambda_powertools.utilities.typing import LambdaContext

from servingctl.api.benchmarks import PRESIGN_CONFIG
from servingctl.api.routes import build_app, handle
from servingctl.api.service import ApiDeps
from servingctl.control.known import Known, known
from servingctl.costs import load_catalog
from servingctl.shared.environment import ApiSettings
from servingctl.store import DynamoStore
from servingctl.store.benchmarks_dynamodb import DynamoBenchmarkStore
from servingctl.tracing import PATCH_MODULES

SETTINGS = ApiSettings.from_env()  # at cold start: a missing variable fails the Init phase
logger = Logger()
tracer = Tracer(patch_modules=PATCH_MODULES)
_clients: dict[str, Any] = {}
_built: dict[str, APIGatewayRestResolver] = {}
_init_lock = threading.Lock()


def _deps() -> ApiDeps:
    """The request's collaborators; RegistryError (the API's 503) when a registry parameter is unusable."""
    found = _stopping()
    found.published.strict()
    return _built_deps(found)


def _stop_deps() -> ApiDeps:
    """The stop's collaborators: what parses of the registry and the copies the records keep."""
    return _built_deps(_stopping())


def _stopping() -> Known:
    """The registry as published (what parses) with the copies the records keep."""
    _build_clients()
    return known(_clients["store"], SETTINGS.registry, SETTINGS.region)


def _build_clients() -> None:
    """Clients, store and catalog are built once per container; the registry is cached by its loader."""
    # One builder at a time, and published whole: requests served concurrently (the twin runs them
    # in threads) must neither see half the clients nor build them at once (boto3's default
    # session is not thread-safe).
    with _init_lock:
        if not _clients:
            built: dict[str, Any] = {name: boto3.client(name) for name in ("ecs", "autoscaling", "elbv2", "cloudwatch")}
            # SigV4 presigning in every region (botocore presigns with SigV2 in us-east-1 and the other
            # old regions, which signs no header): a dataset upload's URL binds its size, checksum and
            # If-None-Match only when they are signed.
            built["s3"] = boto3.client("s3", config=PRESIGN_CONFIG)
            built["sfn"] = boto3.client("stepfunctions")
            built["store"] = DynamoStore(SETTINGS.table)
            built["catalog"] = load_catalog()
            built["runs"] = DynamoBenchmarkStore(SETTINGS.table)
            _clients.update(built)


def _built_deps(found: Known) -> ApiDeps:
    """The routes' collaborators over the given registry."""
    return ApiDeps(
        **_clients,
        registry=found.registry,
        retired=found.retired,
        start_machine_arn=SETTINGS.start_machine_arn,
        stop_machine_arn=SETTINGS.stop_machine_arn,
        bench_machine_arn=SETTINGS.bench_machine_arn,
        records_bucket=SETTINGS.records_bucket,
        bench_ecs=bool(SETTINGS.bench_task_definition),
    )


def _app() -> APIGatewayRestResolver:
    """The resolver, built on the first request (its persistence layer makes a DynamoDB client)."""
    with _init_lock:
        return _build_app()


def _build_app() -> APIGatewayRestResolver:
    if "app" not in _built:
        # Idempotency records share the state table: pk "idempotency#api", sk the hashed key, expiry in `ttl`.
        persistence = DynamoDBPersistenceLayer(
            table_name=SETTINGS.table,
            key_attr="pk",
            sort_key_attr="sk",
            static_pk_value="idempotency#api",
            expiry_attr="ttl",
        )
        _built["app"] = build_app(_deps, persistence, _stop_deps)
    return _built["app"]


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
@tracer.capture_lambda_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Route the proxy event and return the proxy answer."""
    return handle(_app(), event, context)
