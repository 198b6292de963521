"""Lambda's moto patches: Invoke runs the real handler (moto without Docker echoes the payload)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from moto.awslambda_simple.models import LambdaSimpleBackend, lambda_simple_backends

from servingctl_twin.patching import Patch, original, part_of

# (function_name, payload bytes) -> (payload bytes, function error or None).
LambdaRouter = Callable[[str, bytes], tuple[bytes, str | None]]


class Invoker:
    """A site's Lambda: the router Invoke hands each payload to (None: moto's echo)."""

    router: LambdaRouter | None = None


def _lambda_invoke(
    self: LambdaSimpleBackend, function_name: str, qualifier: str | None, body: Any, headers: Any, response_headers: Any
) -> bytes | None:
    """Run the real handler through the site's router; Lambda marks handler errors with X-Amz-Function-Error."""
    invoker = part_of(self.region_name, Invoker)
    if invoker is None or invoker.router is None:
        return original("LambdaSimpleBackend.invoke")(self, function_name, qualifier, body, headers, response_headers)
    self.get_function(function_name, qualifier)  # ResourceNotFoundException like Lambda for unknown names
    raw = body if isinstance(body, bytes) else (body or "").encode()
    payload, function_error = invoker.router(function_name.split(":")[-1], raw)
    if function_error:
        response_headers["x-amz-function-error"] = function_error
    response_headers["x-amz-executed-version"] = "$LATEST"
    return payload


def function_configuration(account_id: str, region: str, name: str) -> tuple[float, int, dict[str, str]]:
    """(Timeout, MemorySize, environment variables) of the Lambda function as configured now."""
    function = lambda_simple_backends[account_id][region].get_function(name)
    return float(function.timeout), int(function.memory_size), dict(function.environment_vars)


PATCHES = [
    # Invoke runs functions/<name>/app.py through the twin's router (moto would echo the payload).
    Patch(
        "LambdaSimpleBackend.invoke",
        LambdaSimpleBackend,
        "invoke",
        ("self", "function_name", "qualifier", "body", "headers", "response_headers"),
        _lambda_invoke,
    ),
    Patch("LambdaSimpleBackend.get_function", LambdaSimpleBackend, "get_function", ("self", "function_name_or_arn", "qualifier")),
]
