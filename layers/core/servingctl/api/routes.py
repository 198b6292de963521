"""The REST routes (Powertools APIGatewayRestResolver with validation): thin calls into api.service.

build_app(deps, persistence) returns the resolver. Starts and stops run through Powertools
idempotency when the caller sends an Idempotency-Key header (the CLI sends one per command): the
same key from the same caller (IAM ARN) answers the first answer again, a key reused for another
request is a 409, and another caller's key is its own. Input is read strictly: invalid JSON is
answered with its line and column, a duplicate key or an unknown query parameter is refused by name
(unknown body fields and coercions such as "30" -> 30 by the strict models). The OpenAPI document is
openapi_document() (committed as api/openapi.json).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from pathlib import Path as FilePath
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.middlewares import NextMiddleware
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Path, Query
from aws_lambda_powertools.event_handler.openapi.types import (
    OpenAPIResponse,
    OpenAPIResponseContentModel,
    OpenAPIResponseContentSchema,
)
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyValidationError,
)
from aws_lambda_powertools.utilities.idempotency.persistence.base import BasePersistenceLayer

from servingctl.api import benchmarks, service
from servingctl.api.benchmarks import BenchmarkDetail, BenchmarkRef, BenchmarkSummary, CancelAnswer, DatasetUpload
from servingctl.api.models import (
    CancelRequest,
    DatasetUploadRequest,
    ErrorBody,
    ExecutionProgress,
    ExecutionRef,
    KeepaliveAnswer,
    KeepaliveRequest,
    Ledger,
    ProfileDetail,
    ProfileSummary,
    StartHistory,
    StartRequest,
    StopRequest,
)
from servingctl.api.service import ApiDeps, ApiError, BadRequest, Conflict, RegistryUnavailable
from servingctl.registry import RegistryError
from servingctl.runs.matrix import BenchmarkInput
from servingctl.wording import problems

OPENAPI_PATH = FilePath(__file__).with_name("openapi.json")
TITLE = "servingctl"
VERSION = "1"
IDEMPOTENCY_EXPIRY_S = 3600
MAX_STARTS = 100  # GET /profiles/{name}/starts answers at most this many (one DynamoDB query page)
ERRORS: dict[int, OpenAPIResponse] = {
    400: {
        "description": "Bad input: the message names the field and the allowed values",
        "content": {"application/json": {"model": ErrorBody}},
    },
    404: {"description": "Unknown profile or execution", "content": {"application/json": {"model": ErrorBody}}},
    409: {"description": "A conflicting operation is running", "content": {"application/json": {"model": ErrorBody}}},
    415: {"description": "The body is not JSON", "content": {"application/json": {"model": ErrorBody}}},
    503: {
        "description": "A registry parameter is missing or malformed: the message names it and the fields at fault "
        "(a stop still works, from the copy the controller keeps)",
        "content": {"application/json": {"model": ErrorBody}},
    },
}


_GATEWAY_BODY: dict[str, OpenAPIResponseContentSchema | OpenAPIResponseContentModel] = {
    "application/json": {
        "schema": {
            "type": "object",
            "properties": {"message": {"type": "string"}, "Message": {"type": "string"}},
        }
    }
}
GATEWAY_REFUSALS: dict[int, OpenAPIResponse] = {
    403: {
        "description": "API Gateway: unsigned (Missing Authentication Token), wrongly signed, or a caller its resource "
        "policy does not admit (Message: ... is not authorized to perform: execute-api:Invoke ...)",
        "content": _GATEWAY_BODY,
    },
    413: {"description": "API Gateway: the body is over its 10 MB payload quota (Request Too Long)", "content": _GATEWAY_BODY},
}
# API Gateway's request validator refusing a body its model (template.yaml's Models) does not admit, as
# the BAD_REQUEST_BODY gateway response renders it: the detail lists the validator's errors.
INVALID_BODY = {
    "type": "object",
    "required": ["message", "detail"],
    "properties": {"message": {"type": "string", "enum": ["Invalid request body"]}, "detail": {"type": "string"}},
}


def _ok(model: Any, description: str = "Success") -> dict[int, OpenAPIResponse]:
    return {200: {"description": description, "content": {"application/json": {"model": model}}}}


ProfileName = Annotated[str, Path(description="profile name from the registry")]
IdempotencyKey = Annotated[
    str | None,
    Header(alias="Idempotency-Key", max_length=128, description="repeat the same key to get the first answer again"),
]


class DuplicateKey(ValueError):
    """A JSON object names the same key twice (json.loads would keep the last one silently)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json.loads' object_pairs_hook: the object, or DuplicateKey naming the repeated key."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise DuplicateKey(key)
        found[key] = value
    return found


def parse_body(text: str) -> Any:
    """The body as JSON, or BadRequest (location body) saying where it broke or which key repeats."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"body: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}", "body") from None
    except DuplicateKey as exc:
        raise BadRequest(f"body: duplicate key {exc.key!r}: each key may appear once in an object", "body") from None


def _error_body(error: ApiError) -> ErrorBody:
    return ErrorBody(status=error.status, error=error.error, message=error.message, field=error.field, fields=error.fields)


def _error_response(error: ApiError) -> Response[str]:
    body = _error_body(error)
    return Response(status_code=error.status, content_type=content_types.APPLICATION_JSON, body=body.model_dump_json())


def _location(loc: Sequence[Any]) -> str:
    """body.lease_minutes, query.limit, header.Idempotency-Key (Powertools lowercases header names)."""
    parts = [str(p) for p in loc] or ["body"]
    if parts[0] == "header" and len(parts) > 1:
        parts[1] = "-".join(word.capitalize() for word in parts[1].split("-"))
    return ".".join(parts)


def _validation_message(exc: RequestValidationError) -> BadRequest:
    """One 400 naming every bad field (lease_minutes, poll.interval_s, ...) and what is allowed, in
    plain words (servingctl.wording); field is the one input at fault (body.lease_minutes, ...)."""
    errors = exc.errors()
    parts = [f"{where or 'body'}: {text}" for where, text in problems(errors)]
    fields = [_location(err.get("loc", ())) for err in errors]
    return BadRequest("invalid request: " + "; ".join(parts), fields[0] if len(fields) == 1 else None, fields)


def _known_query_only(app: APIGatewayRestResolver, next_middleware: NextMiddleware) -> Response[Any]:
    """Refuse a query parameter the route does not declare, by name (as unknown body fields are)."""
    declared = {param.alias for param in app.context["_route"].dependant.query_params}
    unknown = sorted(set(app.current_event.query_string_parameters or {}) - declared)
    if unknown:
        allowed = ", ".join(sorted(declared)) or "none"
        raise BadRequest(
            "invalid request: " + "; ".join(f"{name}: is not a known query parameter (allowed: {allowed})" for name in unknown),
            f"query.{unknown[0]}" if len(unknown) == 1 else None,
            [f"query.{name}" for name in unknown],
        )
    return next_middleware(app)


def build_app(
    deps: Callable[[], ApiDeps], persistence: BasePersistenceLayer | None = None, stop_deps: Callable[[], ApiDeps] | None = None
) -> APIGatewayRestResolver:
    """The resolver with every route; deps() is called per request (clients are cached by the caller)
    and raises RegistryError (503) when a registry parameter is unusable; stop_deps() (default deps)
    serves the stop, which must work from what parses and the kept copies."""
    app = APIGatewayRestResolver(enable_validation=True)
    app.use(middlewares=[_known_query_only])
    _error_answers(app)
    # Registered in this order, the routes keep their order in the OpenAPI document.
    _profile_reads(app, deps)
    _profile_changes(app, deps, _submitter(app, deps, stop_deps or deps, persistence))
    _execution_and_ledger_reads(app, deps)
    _benchmark_routes(app, deps)
    return app


def _caller(app: APIGatewayRestResolver) -> str | None:
    """Who did it: the IAM ARN API Gateway's IAM authorization put in the request context."""
    identity = app.current_event.request_context.identity
    return identity.user_arn or identity.caller


Submit = Callable[[str, str, dict[str, Any], str | None], Response[ExecutionRef]]


def _submitter(
    app: APIGatewayRestResolver,
    deps: Callable[[], ApiDeps],
    stopping: Callable[[], ApiDeps],
    persistence: BasePersistenceLayer | None,
) -> Submit:
    """Start or stop a profile for the caller, remembered by its Idempotency-Key when it gives one."""

    def submit(request: dict[str, Any]) -> dict[str, Any]:
        body = request["body"]
        if request["action"] == "start":
            ref = service.start_profile(deps(), request["profile"], StartRequest.model_validate(body), request["caller"])
        else:
            ref = service.stop_profile(stopping(), request["profile"], StopRequest.model_validate(body), request["caller"])
        return ref.model_dump(mode="json")

    config = IdempotencyConfig(
        # The key is the caller's: another principal's same key is another request, never its answer.
        event_key_jmespath="[caller, key]",
        payload_validation_jmespath="[action, profile, body]",
        expires_after_seconds=IDEMPOTENCY_EXPIRY_S,
    )
    remembered = (
        idempotent_function(data_keyword_argument="request", persistence_store=persistence, config=config)(submit)
        if persistence is not None
        else submit
    )

    def _submit(action: str, name: str, body: dict[str, Any], key: str | None) -> Response[ExecutionRef]:
        request = {"action": action, "profile": name, "body": body, "key": key, "caller": _caller(app)}
        if key is None:
            # Without a key the execution name is what makes a repeated call harmless.
            answer = submit(request)
        else:
            config.register_lambda_context(app.lambda_context)
            answer = remembered(request=request)
        # Nothing started (already READY / STOPPED) is a 200, an execution started or joined a 202.
        return Response(
            status_code=200 if answer.get("already") else 202,
            content_type=content_types.APPLICATION_JSON,
            body=ExecutionRef.model_validate(answer),
        )

    return _submit


def _error_answers(app: APIGatewayRestResolver) -> None:
    """Every error a route raises, as the API's ErrorBody with its status."""

    @app.exception_handler(ApiError)
    def _api_error(error: ApiError) -> Response[str]:
        return _error_response(error)

    @app.exception_handler(RegistryError)
    def _registry_unusable(exc: RegistryError) -> Response[str]:
        field = exc.problems[0].parameter if len(exc.problems) == 1 else None
        return _error_response(RegistryUnavailable(str(exc), field))

    @app.exception_handler(RequestValidationError)
    def _invalid(exc: RequestValidationError) -> Response[str]:
        return _error_response(_validation_message(exc))

    @app.exception_handler(IdempotencyValidationError)
    def _key_reused(exc: IdempotencyValidationError) -> Response[str]:
        return _error_response(Conflict("Idempotency-Key was already used for a different request", "header.Idempotency-Key"))

    @app.exception_handler(IdempotencyAlreadyInProgressError)
    def _key_in_progress(exc: IdempotencyAlreadyInProgressError) -> Response[str]:
        return _error_response(Conflict("a request with this Idempotency-Key is still being handled", "header.Idempotency-Key"))


def _profile_reads(app: APIGatewayRestResolver, deps: Callable[[], ApiDeps]) -> None:
    """GET /profiles, /profiles/{name} and /profiles/{name}/starts."""

    @app.get(
        "/profiles", summary="List the profiles", tags=["profiles"], responses={**_ok(list[ProfileSummary]), 503: ERRORS[503]}
    )
    def list_profiles() -> list[ProfileSummary]:
        return service.list_profiles(deps())

    @app.get(
        "/profiles/<name>",
        summary="A profile's state, capacity, health and accrued cost",
        tags=["profiles"],
        responses={**_ok(ProfileDetail), 404: ERRORS[404], 503: ERRORS[503]},
    )
    def get_profile(name: ProfileName) -> ProfileDetail:
        return service.get_profile(deps(), name)

    @app.get(
        "/profiles/<name>/starts",
        summary="A profile's latest starts: per-phase timelines, p50 and p90",
        tags=["profiles"],
        responses={**_ok(StartHistory), 400: ERRORS[400], 404: ERRORS[404], 503: ERRORS[503]},
    )
    def get_starts(
        name: ProfileName,
        limit: Annotated[int, Query(ge=1, le=MAX_STARTS, description=f"how many of the latest starts (1..{MAX_STARTS})")] = 20,
    ) -> StartHistory:
        return service.starts(deps(), name, limit)


def _profile_changes(app: APIGatewayRestResolver, deps: Callable[[], ApiDeps], submit: Submit) -> None:
    """POST /profiles/{name}/start, /stop and /keepalive."""

    @app.post(
        "/profiles/<name>/start",
        summary="Start a profile (202 with the execution)",
        tags=["profiles"],
        status_code=202,
        description="Joins a start already running for the profile. 409 while a stop of the profile runs, or while "
        "another profile holds the pool and allow_shared_pool is false. lease_minutes is bounded by the profile's "
        "max_lease_minutes.",
        responses={
            202: {"description": "Started or joined", "content": {"application/json": {"model": ExecutionRef}}},
            200: {
                "description": "Already READY: nothing started (already, since, message)",
                "content": {"application/json": {"model": ExecutionRef}},
            },
            **ERRORS,
        },
    )
    def start_profile(
        name: ProfileName, body: Annotated[StartRequest | None, Body()] = None, key: IdempotencyKey = None
    ) -> Response[ExecutionRef]:
        return submit("start", name, (body or StartRequest()).model_dump(mode="json", exclude_none=True), key)

    @app.post(
        "/profiles/<name>/stop",
        summary="Stop a profile (202 with the execution)",
        tags=["profiles"],
        status_code=202,
        description="Preempts a running start (it rolls back). Joins a stop already running for the profile.",
        responses={
            202: {"description": "Started or joined", "content": {"application/json": {"model": ExecutionRef}}},
            200: {
                "description": "Already STOPPED: nothing started (already, since, message)",
                "content": {"application/json": {"model": ExecutionRef}},
            },
            **ERRORS,
        },
    )
    def stop_profile(
        name: ProfileName, body: Annotated[StopRequest | None, Body()] = None, key: IdempotencyKey = None
    ) -> Response[ExecutionRef]:
        return submit("stop", name, (body or StopRequest()).model_dump(mode="json", exclude_none=True), key)

    @app.post(
        "/profiles/<name>/keepalive",
        summary="Extend a READY profile's lease",
        tags=["profiles"],
        description="The lease becomes now + minutes (the profile's default lease when absent); a lease that already "
        "ends later is kept, never shortened, and the answer says so (extended false, message). A keepalive also "
        "restarts the idle window and defers the end of a schedule period that is not enforced; hard limits "
        "(max runtime, budget, enforced schedule) do not move. The caller's IAM ARN is recorded (kept_alive_by). "
        "409 unless the profile is READY (a conditional write: a profile stopping meanwhile is not revived).",
        responses={**_ok(KeepaliveAnswer), **ERRORS},
    )
    def keepalive(name: ProfileName, body: Annotated[KeepaliveRequest | None, Body()] = None) -> KeepaliveAnswer:
        return service.keepalive(deps(), name, body or KeepaliveRequest(), _caller(app))


def _execution_and_ledger_reads(app: APIGatewayRestResolver, deps: Callable[[], ApiDeps]) -> None:
    """GET /executions/{execution_id} and /ledger."""

    @app.get(
        "/executions/<execution_id>",
        summary="Progress of a start or stop execution",
        tags=["executions"],
        responses={**_ok(ExecutionProgress), 400: ERRORS[400], 404: ERRORS[404], 503: ERRORS[503]},
    )
    def get_execution(
        execution_id: Annotated[str, Path(description="execution name (start-... / stop-...) or ARN")],
    ) -> ExecutionProgress:
        return service.execution_progress(deps(), execution_id)

    @app.get(
        "/ledger",
        summary="Sessions with their cost and monthly totals per profile",
        tags=["costs"],
        responses={**_ok(Ledger), 400: ERRORS[400], 404: ERRORS[404], 503: ERRORS[503]},
    )
    def get_ledger(profile: Annotated[str | None, Query(description="only this profile")] = None) -> Ledger:
        return service.ledger(deps(), profile)


def _benchmark_routes(app: APIGatewayRestResolver, deps: Callable[[], ApiDeps]) -> None:
    """POST /benchmarks, GET /benchmarks and /benchmarks/{run_id}."""

    @app.post(
        "/benchmarks",
        summary="Benchmark a profile from inside the VPC (202 with the run)",
        tags=["benchmarks"],
        status_code=202,
        description="The body is run_benchmark's input (only profile is required). Checked at once with the state "
        "machine's rules: bounds that keep a scenario inside a Lambda worker's 15 minutes, the profile's context "
        "length. 409 when the profile is not READY and start is false, or the run_id is taken.",
        responses={202: {"description": "Started", "content": {"application/json": {"model": BenchmarkRef}}}, **ERRORS},
    )
    def start_benchmark(body: Annotated[BenchmarkInput, Body()]) -> Response[BenchmarkRef]:
        return Response(
            status_code=202, content_type=content_types.APPLICATION_JSON, body=benchmarks.start_benchmark(deps(), body)
        )

    @app.post(
        "/benchmarks/<run_id>/dataset",
        summary="Where to upload a run's prompts (a presigned S3 PUT), before POST /benchmarks with a dataset",
        tags=["benchmarks"],
        description="For a run id not used yet (409 otherwise). The URL takes one PUT of exactly `size_bytes` bytes whose "
        "sha256 is `sha256`, with the answer's headers, within expires_in_s; S3 refuses other bytes, and a second "
        "upload to the same run. POST /benchmarks then names the run id and describes the upload in `dataset`; the "
        "worker checks it again before it sends anything.",
        responses={**_ok(DatasetUpload), **ERRORS},
    )
    def upload_dataset(
        run_id: Annotated[str, Path(description="the run id the prompts are for (the CLI picks a new one)")],
        body: Annotated[DatasetUploadRequest, Body()],
    ) -> DatasetUpload:
        return benchmarks.upload_dataset(deps(), run_id, body.size_bytes, body.sha256)

    @app.get(
        "/benchmarks",
        summary="Benchmark runs, newest first",
        tags=["benchmarks"],
        responses={**_ok(list[BenchmarkSummary]), 400: ERRORS[400], 404: ERRORS[404], 503: ERRORS[503]},
    )
    def list_benchmarks(
        profile: Annotated[str | None, Query(description="only this profile")] = None,
        limit: Annotated[int, Query(ge=1, le=200, description="at most this many runs")] = 50,
    ) -> list[BenchmarkSummary]:
        return benchmarks.list_benchmarks(deps(), profile, limit)

    @app.post(
        "/benchmarks/<run_id>/cancel",
        summary="Cancel a benchmark run: its execution stopped, the run CANCELLED",
        tags=["benchmarks"],
        description="Only a PLANNED or RUNNING run (409 once it ended). The run is marked CANCELLED first (its "
        "workers stop and write nothing more), then its execution is stopped (Step Functions stops its ECS task "
        "and child executions), its hold on the profile released, and a run that asked for a stop starts "
        "stop_profile. What it measured before stays stored. The caller's IAM ARN is recorded in the run's error.",
        responses={**_ok(CancelAnswer), **ERRORS},
    )
    def cancel_benchmark(
        run_id: Annotated[str, Path(description="run id (GET /benchmarks lists them)")],
        body: Annotated[CancelRequest | None, Body()] = None,
    ) -> CancelAnswer:
        return benchmarks.cancel_benchmark(deps(), run_id, _caller(app))

    @app.get(
        "/benchmarks/<run_id>",
        summary="One benchmark run: results, comparisons, record links",
        tags=["benchmarks"],
        responses={**_ok(BenchmarkDetail), 400: ERRORS[400], 404: ERRORS[404], 503: ERRORS[503]},
    )
    def get_benchmark(run_id: Annotated[str, Path(description="run id (GET /benchmarks lists them)")]) -> BenchmarkDetail:
        return benchmarks.get_benchmark(deps(), run_id)


def handle(app: APIGatewayRestResolver, event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Resolve a proxy event; a body that is not UTF-8 JSON, not valid JSON or repeats a key is refused
    before any route runs (the API takes JSON only)."""
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    content_type = (headers.get("content-type") or "").split(";")[0].strip().lower()
    if event.get("body") and content_type and content_type != "application/json":
        return _refusal(
            ErrorBody(
                status=415,
                error="UnsupportedMediaType",
                field="header.Content-Type",
                fields=["header.Content-Type"],
                message=f"Content-Type {content_type!r} is not accepted; send application/json",
            )
        )
    if event.get("body") and event.get("isBase64Encoded"):
        # A binary body (API Gateway base64-encodes one): JSON must be UTF-8 text.
        try:
            text = base64.b64decode(event["body"], validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return _refusal(
                ErrorBody(status=400, error="BadRequest", field="body", fields=["body"], message="body: not UTF-8 JSON")
            )
        event = {**event, "body": text, "isBase64Encoded": False}
    if event.get("body"):
        try:
            parse_body(event["body"])
        except BadRequest as error:
            return _refusal(_error_body(error))
    return app.resolve(event, context)


def _refusal(error: ErrorBody) -> dict[str, Any]:
    return {
        "statusCode": error.status,
        "headers": {"Content-Type": "application/json"},
        "body": error.model_dump_json(),
        "isBase64Encoded": False,
    }


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document generated from the routes (validation errors answer 400, not Powertools' 422)."""

    def no_deps() -> ApiDeps:
        raise RuntimeError("the OpenAPI document is generated without calling any route")

    document: dict[str, Any] = json.loads(build_app(no_deps).get_openapi_json_schema(title=TITLE, version=VERSION))
    for path in document["paths"].values():
        for method, operation in path.items():
            operation["responses"].pop("422", None)
            # API Gateway's own answers, before the function runs (its gateway responses' bodies).
            operation["responses"]["403"] = GATEWAY_REFUSALS[403]
            if method == "post":
                operation["responses"]["413"] = GATEWAY_REFUSALS[413]
                refused = operation["responses"]["400"]
                refused["description"] += "; or API Gateway's request validator: Invalid request body, with its detail"
                body = refused["content"]["application/json"]
                body["schema"] = {"anyOf": [body["schema"], INVALID_BODY]}
    components = document.setdefault("components", {})
    for unused in ("HTTPValidationError", "ValidationError", "ResponseValidationError"):
        components.get("schemas", {}).pop(unused, None)
    # API Gateway's AWS_IAM authorization: every request is signed with SigV4 (service execute-api).
    components["securitySchemes"] = {
        "sigv4": {"type": "apiKey", "name": "Authorization", "in": "header", "x-amazon-apigateway-authtype": "awsSigv4"}
    }
    document["security"] = [{"sigv4": []}]
    return document


def write_openapi(path: FilePath = OPENAPI_PATH) -> FilePath:
    """Regenerate the committed document (make openapi)."""
    path.write_text(json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n")
    return path


if __name__ == "__main__":
    print(write_openapi())
