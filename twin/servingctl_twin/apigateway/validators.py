"""The twin's API Gateway request validators: template.yaml's models and validator settings per method
(the SAM events' RequestModel and RequestParameters), a request checked against them before the
function runs, and the refusal rendered by the template's gateway response (BAD_REQUEST_BODY,
BAD_REQUEST_PARAMETERS) as API Gateway renders it. A body is checked with jsonschema's draft 4, the
draft API Gateway's validator implements; the detail imitates that validator's (Java
json-schema-validator) messages, which name a property missing or not allowed, not the field of a
wrong type or value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from jsonschema import Draft4Validator, ValidationError

BODY_TYPE, PARAMETERS_TYPE = "BAD_REQUEST_BODY", "BAD_REQUEST_PARAMETERS"
# API Gateway's answers when the API defines no gateway response of that type.
DEFAULT_MESSAGES = {BODY_TYPE: "Invalid request body", PARAMETERS_TYPE: "Missing required request parameters: [{}]"}
DEFAULT_TEMPLATE = '{"message": $context.error.messageString}'
_JSON_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (list, "array"), (dict, "object"))
_VARIABLE = re.compile(r"\$context\.error\.(messageString|message|validationErrorString|responseType)\b")


@dataclass(frozen=True)
class MethodValidation:
    """What API Gateway checks of one method before its integration: the body against the model (when
    ValidateBody) and the required request parameters (when ValidateParameters)."""

    schema: dict[str, Any] | None = None
    validate_body: bool = False
    validate_parameters: bool = False
    required: tuple[tuple[str, str], ...] = ()  # (querystring|header, name): a path parameter is always there


@dataclass(frozen=True)
class GatewayResponse:
    """A gateway response: status and body template (simple $context substitution, no VTL)."""

    status: int
    template: str


@dataclass(frozen=True)
class Validators:
    """The API's validators by (METHOD, resource path) and its gateway responses by type."""

    methods: Mapping[tuple[str, str], MethodValidation] = field(default_factory=dict)
    responses: Mapping[str, GatewayResponse] = field(default_factory=dict)


def _required(parameters: Any) -> tuple[tuple[str, str], ...]:
    """SAM's RequestParameters (a name, or {name: {Required: bool}}) as the required (location, name)."""
    required = []
    for entry in parameters or []:
        name, options = (entry, {}) if isinstance(entry, str) else next(iter(entry.items()))
        _, location, key = name.split(".", 2)  # method.request.querystring.limit
        if options.get("Required"):
            required.append((location, key))
    return tuple(required)


def load_validators(template: Mapping[str, Any], api: str) -> Validators:
    """The validators and gateway responses template.yaml gives the API (logical ID api), as SAM
    deploys them from its functions' Api events."""
    resources = template["Resources"]
    api_properties = resources[api]["Properties"]
    models = api_properties.get("Models") or {}
    methods: dict[tuple[str, str], MethodValidation] = {}
    for resource in resources.values():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        for event in (resource["Properties"].get("Events") or {}).values():
            props = event.get("Properties") or {}
            if event.get("Type") != "Api" or props.get("RestApiId") != {"Ref": api}:
                continue
            model = props.get("RequestModel") or {}
            methods[(props["Method"].upper(), props["Path"])] = MethodValidation(
                schema=models.get(model["Model"]) if model else None,
                validate_body=bool(model.get("ValidateBody")),
                validate_parameters=bool(model.get("ValidateParameters")),
                required=_required(props.get("RequestParameters")),
            )
    responses = {
        kind: GatewayResponse(
            int(r.get("StatusCode", 400)), (r.get("ResponseTemplates") or {}).get("application/json", DEFAULT_TEMPLATE)
        )
        for kind, r in (api_properties.get("GatewayResponses") or {}).items()
    }
    return Validators(methods, responses)


def _json_type(value: Any) -> str:
    return next((name for kind, name in _JSON_TYPES if isinstance(value, kind)), "null")


def _listed(values: Any) -> str:
    return json.dumps(sorted(values) if isinstance(values, set) else list(values), separators=(",", ":"))


def _message(error: ValidationError) -> str:
    """One error in the words of API Gateway's validator (json-schema-validator's report messages)."""
    # jsonschema types these as "maybe unset"; a reported error always carries them.
    keyword, value, instance = error.validator, cast(Any, error.validator_value), cast(Any, error.instance)
    if keyword == "type":
        allowed = sorted([value] if isinstance(value, str) else value)  # the validator lists them in name order
        return f"instance type ({_json_type(instance)}) does not match any allowed primitive type (allowed: {_listed(allowed)})"
    if keyword == "required":
        return f"object has missing required properties ({_listed(p for p in value if p not in instance)})"
    if keyword == "additionalProperties":
        schema = cast(Mapping[str, Any], error.schema)
        extra = sorted(set(instance) - set(schema.get("properties") or {}))
        return f"object instance has properties which are not allowed by the schema: {_listed(extra)}"
    if keyword == "minimum":
        return f"numeric instance is lower than the required minimum (minimum: {value}, found: {instance})"
    if keyword == "maximum":
        return f"numeric instance is greater than the required maximum (maximum: {value}, found: {instance})"
    return error.message


def body_errors(schema: Mapping[str, Any], body: bytes) -> list[str]:
    """What API Gateway's validator says of body against the model (an empty body is checked as {}):
    nothing when it conforms. Duplicate keys pass (the last one counts, as in Jackson)."""
    try:
        document = json.loads(body.decode()) if body.strip() else {}
    except UnicodeDecodeError as error:
        return [f"Invalid UTF-8 middle byte at position {error.start}"]
    except json.JSONDecodeError as error:
        return [f"Unexpected character at line {error.lineno}, column {error.colno}: {error.msg}"]
    errors = Draft4Validator(dict(schema)).iter_errors(document)
    return [_message(e) for e in sorted(errors, key=lambda e: [str(p) for p in e.absolute_path])]


def render(validators: Validators, response_type: str, message: str, detail: str) -> tuple[int, bytes]:
    """The gateway response of this type with its variables substituted, as API Gateway sends it
    (validationErrorString JSON-escaped, messageString quoted)."""
    response = validators.responses.get(response_type, GatewayResponse(400, DEFAULT_TEMPLATE))
    values = {
        "message": message,
        "messageString": json.dumps(message),
        "responseType": response_type,
        "validationErrorString": json.dumps(detail)[1:-1],
    }
    return response.status, _VARIABLE.sub(lambda m: values[m.group(1)], response.template).encode()


def check(
    validators: Validators, method: str, resource: str, headers: Mapping[str, str], query: Mapping[str, Any], body: bytes
) -> tuple[int, bytes] | None:
    """API Gateway's refusal (status, body) of a request its method's validator rejects, None when it
    passes: the required parameters first, then a JSON body against the model."""
    rule = validators.methods.get((method, resource))
    if rule is None:
        return None
    lower = {k.lower() for k in headers}
    if rule.validate_parameters:
        missing = [
            name
            for location, name in rule.required
            if (location == "querystring" and name not in query) or (location == "header" and name.lower() not in lower)
        ]
        if missing:
            message = DEFAULT_MESSAGES[PARAMETERS_TYPE].format(", ".join(missing))
            return render(validators, PARAMETERS_TYPE, message, message)
    content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), "application/json")
    # The model is mapped to application/json: a body of another type reaches the function unchecked.
    if rule.validate_body and rule.schema is not None and content_type.split(";")[0].strip().lower() == "application/json":
        errors = body_errors(rule.schema, body)
        if errors:
            return render(validators, BODY_TYPE, DEFAULT_MESSAGES[BODY_TYPE], "[" + ", ".join(errors) + "]")
    return None
