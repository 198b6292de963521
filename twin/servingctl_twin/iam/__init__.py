"""IAM in the twin: which function makes an AWS call, what IAM sees of it (action, resource ARNs,
condition keys), and that function's policy deciding it as AWS would.

moto accepts every call from anyone. The twin, given template.yaml after the SAM transform, records
each call a handler makes (a botocore event hook; the handler's name comes from the twin's router
through a context variable) and answers AccessDenied where the function's role would be refused,
so a grant missing from the template fails on the twin as it would on AWS. It also plays S3's
answer for a missing key: 403 AccessDenied, not 404 NoSuchKey, unless the caller may s3:ListBucket.
A role a function assumes (sts:AssumeRole with session tags, as the bench worker does with
BenchRunRole) is followed by its credentials: every call signed with them is decided by that role's
policy, with aws:PrincipalTag/<key> from the session's tags and policy variables (${aws:...}) filled in.

Owns: the operation -> IAM action map (botocore's names, a small table of exceptions), the resource
ARNs and condition keys of the operations servingctl calls, the policy evaluator (Allow/Deny,
wildcards, the condition operators the template uses), the CloudFormation intrinsics needed to
render a role's policy with the twin's names, and the recorder.
"""

from __future__ import annotations

import contextlib
import functools
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

import boto3
import botocore.handlers
import botocore.session
from botocore.awsrequest import AWSResponse, HTTPHeaders

# The twin function whose handler is running in this thread (None: the twin, a test, the CLI).
CALLER: ContextVar[str | None] = ContextVar("servingctl_twin_caller", default=None)

# IAM's service prefix where it is not botocore's signing name.
IAM_PREFIX = {"cloudwatch": "cloudwatch"}
# Operations authorised by an action of another name (AWS's Service Authorization Reference).
ACTION_OF_OPERATION = {
    ("s3", "HeadObject"): "s3:GetObject",
    ("s3", "ListObjectsV2"): "s3:ListBucket",
    ("s3", "ListObjects"): "s3:ListBucket",
    ("lambda", "Invoke"): "lambda:InvokeFunction",
    ("s3", "CreateMultipartUpload"): "s3:PutObject",
    ("s3", "UploadPart"): "s3:PutObject",
    ("s3", "CompleteMultipartUpload"): "s3:PutObject",
    ("s3", "ListParts"): "s3:ListMultipartUploadParts",
    ("s3", "ListMultipartUploads"): "s3:ListBucketMultipartUploads",
}
# IAM actions that are permissions only: no operation of that name exists (why, in words).
PERMISSION_ONLY = {
    "iam:PassRole": "checked when a call hands a role to a service (RunTask's task and execution roles)",
    "logs:CreateLogDelivery": "vended-log delivery setup, done by Step Functions itself",
    "logs:GetLogDelivery": "vended-log delivery setup, done by Step Functions itself",
    "logs:UpdateLogDelivery": "vended-log delivery setup, done by Step Functions itself",
    "logs:DeleteLogDelivery": "vended-log delivery setup, done by Step Functions itself",
    "logs:ListLogDeliveries": "vended-log delivery setup, done by Step Functions itself",
    "dynamodb:ConditionCheckItem": "the condition check of one TransactWriteItems item",
    "sts:TagSession": "checked when an AssumeRole call passes session tags",
}
# Dependent actions: AWS also authorises these when the key action's call names a launch template
# (Amazon EC2 Auto Scaling user guide, API permissions: a launch template's launch, its tag
# specifications and its instance profile's role).
DEPENDENT_ACTIONS = {
    "autoscaling:UpdateAutoScalingGroup": ("ec2:RunInstances", "ec2:CreateTags", "iam:PassRole"),
}
# Calls IAM does not authorise (GetCallerIdentity works even under an explicit deny).
UNAUTHORISED_CALLS = {("sts", "GetCallerIdentity")}
# The error code each protocol family answers a refused call with.
DENIED_CODE = {
    "ec2": "UnauthorizedOperation",
    "s3": "AccessDenied",
    "autoscaling": "AccessDenied",
    "elbv2": "AccessDenied",
    "cloudwatch": "AccessDenied",
    "sts": "AccessDenied",
    "cloudformation": "AccessDenied",
}

Statement = dict[str, Any]


class UnknownCall(LookupError):
    """An operation whose resource ARNs this module cannot tell yet (teach _RESOURCES its shape)."""


@dataclass(frozen=True)
class Request:
    """What IAM evaluates for one call: an action on one resource with the request's condition keys."""

    action: str
    resource: str
    context: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def iam_action(service: str, operation: str) -> str:
    """The IAM action authorising a boto3 service's operation."""
    if (service, operation) in ACTION_OF_OPERATION:
        return ACTION_OF_OPERATION[(service, operation)]
    prefix = IAM_PREFIX.get(service) or botocore.session.get_session().get_service_model(service).signing_name
    return f"{prefix}:{operation}"


def action_exists(action: str) -> bool:
    """True when action names a real IAM permission: an operation of its service (by botocore's
    models and the exceptions above) or a permission-only action."""
    if action in PERMISSION_ONLY or action in ACTION_OF_OPERATION.values():
        return True
    prefix, name = action.split(":", 1)
    return any(name in operations for operations in operations_by_prefix().get(prefix, []))


@functools.cache
def operations_by_prefix() -> dict[str, list[set[str]]]:
    """IAM prefix -> the operation names of each botocore service signing with it (loaded once:
    botocore parses a model file per service); operations authorised by another action left out."""
    session = botocore.session.get_session()
    found: dict[str, list[set[str]]] = {}
    for service in session.get_available_services():
        model = session.get_service_model(service)
        operations = {op for op in model.operation_names if (service, op) not in ACTION_OF_OPERATION}
        found.setdefault(IAM_PREFIX.get(service) or model.signing_name, []).append(operations)
    return found


# ---- the resources and condition keys of a call --------------------------------------------------
@dataclass(frozen=True)
class Names:
    """What turns a call's parameters into ARNs: the twin's account and region, the partition key of
    its tables, and the tags and ARNs of its Auto Scaling groups."""

    account: str
    region: str
    partition_keys: Mapping[str, str]
    asg_arn: Callable[[str], str]
    asg_tags: Callable[[str], Mapping[str, str]]

    def arn(self, service: str, resource: str, *, regional: bool = True) -> str:
        """arn:aws:<service>:<region>:<account>:<resource>."""
        return f"arn:aws:{service}:{self.region if regional else ''}:{self.account if regional else ''}:{resource}"


def _leading_keys_of_query(params: Mapping[str, Any], partition_key: str | None) -> tuple[str, ...]:
    """The partition key value of a Query's KeyConditionExpression (#n0 = :v0 or pk = :pk); with
    no partition key named, the first equality's."""
    names = params.get("ExpressionAttributeNames") or {}
    values = params.get("ExpressionAttributeValues") or {}
    for name, placeholder in re.findall(r"(#?[A-Za-z0-9_]+)\s*=\s*(:[A-Za-z0-9_]+)", params.get("KeyConditionExpression", "")):
        if partition_key is None or names.get(name, name) == partition_key:
            return (next(iter(values[placeholder].values())),)
    return ()


def _dynamodb(operation: str, params: Mapping[str, Any], names: Names) -> list[Request]:
    def one(action: str, table: str, key: Mapping[str, Any] | None) -> Request:
        partition_key = names.partition_keys.get(table, "pk")
        leading = (next(iter(key[partition_key].values())),) if key and partition_key in key else ()
        context = {"dynamodb:LeadingKeys": leading} if leading else {}
        return Request(action, names.arn("dynamodb", f"table/{table}"), context)

    if operation in ("GetItem", "DeleteItem", "UpdateItem"):
        return [one(f"dynamodb:{operation}", params["TableName"], params["Key"])]
    if operation == "PutItem":
        return [one("dynamodb:PutItem", params["TableName"], params["Item"])]
    if operation == "Query":
        table, index = params["TableName"], params.get("IndexName")
        # A query of an index is authorised on the index's ARN; its partition key is the index's own
        # (the one equality a key condition must have), not the table's.
        leading = _leading_keys_of_query(params, names.partition_keys.get(table, "pk") if index is None else None)
        resource = names.arn("dynamodb", f"table/{table}" + (f"/index/{index}" if index else ""))
        return [Request("dynamodb:Query", resource, {"dynamodb:LeadingKeys": leading} if leading else {})]
    if operation == "TransactWriteItems":
        # Each item is authorised by its own action (PutItem, UpdateItem, DeleteItem, ConditionCheckItem).
        actions = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem", "ConditionCheck": "ConditionCheckItem"}
        requests = []
        for item in params["TransactItems"]:
            [(kind, body)] = item.items()
            requests.append(one(f"dynamodb:{actions[kind]}", body["TableName"], body.get("Key") or body.get("Item")))
        return requests
    raise UnknownCall(f"dynamodb:{operation}")


def _ecs(operation: str, params: Mapping[str, Any], names: Names) -> list[Request]:
    cluster = params.get("cluster", "default")
    cluster_arn = cluster if cluster.startswith("arn:") else names.arn("ecs", f"cluster/{cluster}")
    cluster_name = cluster_arn.rsplit("/", 1)[-1]
    context = {"ecs:cluster": (cluster_arn,)}
    action = f"ecs:{operation}"

    def under(kind: str, ids: Sequence[str]) -> list[Request]:
        return [
            Request(action, i if i.startswith("arn:") else names.arn("ecs", f"{kind}/{cluster_name}/{i}"), context) for i in ids
        ]

    if operation == "UpdateService":
        return under("service", [params["service"]])
    if operation == "DescribeServices":
        return under("service", params["services"])
    if operation == "DescribeTasks":
        return under("task", params["tasks"])
    if operation == "DescribeContainerInstances":
        return under("container-instance", params["containerInstances"])
    if operation == "ListContainerInstances":
        return [Request(action, cluster_arn, context)]
    if operation == "ListServices":
        return [Request(action, "*", context)]  # no resource type; the ecs:cluster condition key scopes it
    if operation == "DescribeTaskDefinition":
        return [Request(action, "*")]  # no resource-level permissions (Service Authorization Reference)
    if operation == "ListTasks":
        instance = params.get("containerInstance")
        return under("container-instance", [instance]) if instance else [Request(action, "*", context)]
    raise UnknownCall(action)


def _autoscaling(operation: str, params: Mapping[str, Any], names: Names) -> list[Request]:
    action = f"autoscaling:{operation}"
    if operation.startswith("Describe"):
        return [Request(action, "*")]
    if operation not in ("SetDesiredCapacity", "UpdateAutoScalingGroup", "SetInstanceProtection"):
        raise UnknownCall(action)
    group = params["AutoScalingGroupName"]
    context: dict[str, tuple[str, ...]] = {}
    for key, value in names.asg_tags(group).items():
        context[f"aws:ResourceTag/{key}"] = context[f"autoscaling:ResourceTag/{key}"] = (value,)
    for size in ("MinSize", "MaxSize"):
        if operation == "UpdateAutoScalingGroup" and size in params:
            context[f"autoscaling:{size}"] = (str(params[size]),)
    requests = [Request(action, names.asg_arn(group), context)]
    template = (params.get("LaunchTemplate") or {}).get("LaunchTemplateId") if operation == "UpdateAutoScalingGroup" else None
    if template:
        # The group's next launch goes through this template: the caller must be allowed to launch
        # through it (the twin checks the launch itself; tagging and the role pass follow from it).
        arn = (
            names.asg_arn(group).split(":autoScalingGroup:")[0].replace(":autoscaling:", ":ec2:") + f":launch-template/{template}"
        )
        requests.append(Request("ec2:RunInstances", "*", {"ec2:LaunchTemplate": (arn,)}))
    return requests


def _states(operation: str, params: Mapping[str, Any], names: Names) -> list[Request]:
    for key in ("stateMachineArn", "executionArn"):
        if key in params:
            return [Request(f"states:{operation}", params[key])]
    raise UnknownCall(f"states:{operation}")


def _s3(operation: str, params: Mapping[str, Any], names: Names) -> list[Request]:
    action = iam_action("s3", operation)
    if operation in (
        "GetObject",
        "HeadObject",
        "PutObject",
        "DeleteObject",
        "CreateMultipartUpload",
        "UploadPart",
        "CompleteMultipartUpload",
        "ListParts",
        "AbortMultipartUpload",
    ):
        return [Request(action, f"arn:aws:s3:::{params['Bucket']}/{params['Key']}")]
    if operation == "ListMultipartUploads":
        return [Request(action, f"arn:aws:s3:::{params['Bucket']}")]
    if operation in ("ListObjectsV2", "ListObjects"):
        context = {"s3:prefix": (params["Prefix"],)} if "Prefix" in params else {}
        return [Request(action, f"arn:aws:s3:::{params['Bucket']}", context)]
    raise UnknownCall(action)


def _events(operation: str, params: Mapping[str, Any], names: Names) -> list[Request]:
    if operation != "PutEvents":
        raise UnknownCall(f"events:{operation}")
    buses = {entry.get("EventBusName") or "default" for entry in params["Entries"]}
    return [
        Request("events:PutEvents", b if b.startswith("arn:") else names.arn("events", f"event-bus/{b}")) for b in sorted(buses)
    ]


def _ssm(operation: str, params: Mapping[str, Any], names: Names) -> list[Request]:
    if operation == "GetParametersByPath":
        # Authorised on the path asked for, not on the parameters it returns (AWS's Parameter Store
        # retrieval authorization).
        return [Request("ssm:GetParametersByPath", names.arn("ssm", "parameter/" + params["Path"].strip("/")))]
    wanted = params["Names"] if operation == "GetParameters" else [params["Name"]]
    return [Request(f"ssm:{operation}", names.arn("ssm", "parameter/" + n.lstrip("/"))) for n in wanted]


def _logs(operation: str, params: Mapping[str, Any], names: Names) -> list[Request]:
    # FilterLogEvents is authorised on its log group, which IAM sees as log-group:<name>:* (why
    # grants carry the :* that Terraform's log group ARN lacks); GetLogEvents on the stream.
    group = params.get("logGroupName", "")
    if operation == "FilterLogEvents":
        return [Request("logs:FilterLogEvents", names.arn("logs", f"log-group:{group}:*"))]
    if operation == "GetLogEvents":
        return [Request("logs:GetLogEvents", names.arn("logs", f"log-group:{group}:log-stream:{params['logStreamName']}"))]
    raise UnknownCall(f"logs:{operation}")


def _sts(operation: str, params: Mapping[str, Any], names: Names) -> list[Request]:
    if operation != "AssumeRole":
        raise UnknownCall(f"sts:{operation}")
    # Session tags are authorised by sts:TagSession on the same role, with the tags as request tags.
    # Both requests carry the tags asked for (a trust policy's conditions on them apply to either).
    tags = {t["Key"]: t["Value"] for t in params.get("Tags") or []}
    context = {f"aws:RequestTag/{k}": (v,) for k, v in tags.items()} | ({"aws:TagKeys": tuple(tags)} if tags else {})
    assume = Request("sts:AssumeRole", params["RoleArn"], context)
    return [assume, Request("sts:TagSession", params["RoleArn"], context)] if tags else [assume]


def _cloudwatch(operation: str, params: Mapping[str, Any], names: Names) -> list[Request]:
    """CloudWatch has no resource-level permissions; PutMetricData carries cloudwatch:namespace."""
    context = {"cloudwatch:namespace": (params["Namespace"],)} if operation == "PutMetricData" else {}
    return [Request(iam_action("cloudwatch", operation), "*", context)]


def _application_autoscaling(operation: str, params: Mapping[str, Any], names: Names) -> list[Request]:
    """A scalable target's calls: its ARN (scalable-target/<id>, an id AWS gives it) with the
    service namespace and scalable dimension condition keys."""
    if operation != "RegisterScalableTarget":
        raise UnknownCall(f"application-autoscaling:{operation}")
    target = re.sub(r"[^0-9a-z]", "", params["ResourceId"].lower())[-32:]
    context = {
        "application-autoscaling:service-namespace": (params["ServiceNamespace"],),
        "application-autoscaling:scalable-dimension": (params["ScalableDimension"],),
    }
    return [
        Request(
            "application-autoscaling:RegisterScalableTarget",
            names.arn("application-autoscaling", f"scalable-target/{target}"),
            context,
        )
    ]


def _cloudformation(operation: str, params: Mapping[str, Any], names: Names) -> list[Request]:
    if operation != "DescribeStacks" or "StackName" not in params:
        raise UnknownCall(f"cloudformation:{operation}")
    # A stack's ARN ends in its id, which a caller naming the stack does not know: grants end in /*.
    name = params["StackName"]
    return [
        Request(
            "cloudformation:DescribeStacks", name if name.startswith("arn:") else names.arn("cloudformation", f"stack/{name}/*")
        )
    ]


def _elbv2(operation: str, params: Mapping[str, Any], names: Names) -> list[Request]:
    # ModifyRule is authorised on the rule (listener-rule/app/...); Describe* has no resource-level
    # permission and DescribeTargetHealth is a Describe as IAM sees it.
    if operation == "ModifyRule":
        return [Request("elasticloadbalancing:ModifyRule", params["RuleArn"])]
    return [Request(iam_action("elbv2", operation), "*")]


def _servicequotas(operation: str, params: Mapping[str, Any], names: Names) -> list[Request]:
    # GetServiceQuota is authorised on the quota (servicequotas:<region>:<account>:<service>/<code>);
    # GetAWSDefaultServiceQuota has no resource type (Service Authorization Reference).
    if operation == "GetServiceQuota":
        return [
            Request("servicequotas:GetServiceQuota", names.arn("servicequotas", f"{params['ServiceCode']}/{params['QuotaCode']}"))
        ]
    if operation == "GetAWSDefaultServiceQuota":
        return [Request("servicequotas:GetAWSDefaultServiceQuota", "*")]
    raise UnknownCall(f"servicequotas:{operation}")


def _unscoped(service: str) -> Callable[[str, Mapping[str, Any], Names], list[Request]]:
    """Services whose calls here have no resource-level permission: AWS evaluates Resource "*"."""
    return lambda operation, params, names: [Request(iam_action(service, operation), "*")]


_RESOURCES: dict[str, Callable[[str, Mapping[str, Any], Names], list[Request]]] = {
    "dynamodb": _dynamodb,
    "ecs": _ecs,
    "autoscaling": _autoscaling,
    "stepfunctions": _states,
    "s3": _s3,
    "events": _events,
    "ssm": _ssm,
    "logs": _logs,
    "sts": _sts,
    "cloudformation": _cloudformation,
    "service-quotas": _servicequotas,
    "ec2": _unscoped("ec2"),
    "elbv2": _elbv2,
    "cloudwatch": _cloudwatch,
    "application-autoscaling": _application_autoscaling,
}


def requests_of(service: str, operation: str, params: Mapping[str, Any], names: Names) -> list[Request]:
    """What IAM evaluates for a call (empty for calls IAM does not authorise)."""
    if (service, operation) in UNAUTHORISED_CALLS:
        return []
    if service not in _RESOURCES:
        raise UnknownCall(f"{service}:{operation}")
    return _RESOURCES[service](operation, params, names)


# ---- the policy evaluator -----------------------------------------------------------------------
def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


_VARIABLE = re.compile(r"\$\{([^}]+)\}")


def with_variables(pattern: str, context: Mapping[str, tuple[str, ...]]) -> str | None:
    """pattern with its policy variables (${aws:PrincipalTag/run}) replaced by the request's single
    values, marked literal (\0 ... \0: a tag value's * is no wildcard); None when one is missing
    (the statement then matches nothing, as IAM treats a variable it cannot fill)."""

    def fill(match: re.Match[str]) -> str:
        values = context.get(match.group(1))
        if not values or len(values) != 1:
            raise LookupError(match.group(1))
        return f"\0{values[0]}\0"

    try:
        return _VARIABLE.sub(fill, pattern)
    except LookupError:
        return None


def _like(pattern: str, value: str, *, ignore_case: bool = False) -> bool:
    """IAM's wildcards: * any run of characters (across : and /), ? one character (not inside a
    filled-in variable's value, marked by \0)."""
    parts = pattern.split("\0")
    regex = "".join(
        re.escape(part) if i % 2 else "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in part)
        for i, part in enumerate(parts)
    )
    return re.fullmatch(regex, value, re.IGNORECASE | re.DOTALL if ignore_case else re.DOTALL) is not None


def _compare(base: str, policy_value: str, value: str) -> bool:
    if base in ("StringEquals", "ArnEquals"):
        return value == policy_value.replace("\0", "") if base == "StringEquals" else _like(policy_value, value)
    if base in ("StringLike", "ArnLike"):
        return _like(policy_value, value)
    if base == "StringEqualsIgnoreCase":
        return value.lower() == policy_value.lower()
    if base == "Bool":
        return value.lower() == policy_value.lower()
    if base.startswith("Numeric"):
        a, b = float(value), float(policy_value)
        return {
            "NumericEquals": a == b,
            "NumericLessThan": a < b,
            "NumericLessThanEquals": a <= b,
            "NumericGreaterThan": a > b,
            "NumericGreaterThanEquals": a >= b,
        }[base]
    raise ValueError(f"condition operator {base}: not evaluated by the twin")


_NEGATED = {
    "StringNotEquals": "StringEquals",
    "StringNotLike": "StringLike",
    "ArnNotEquals": "ArnEquals",
    "ArnNotLike": "ArnLike",
    "NumericNotEquals": "NumericEquals",
    "StringNotEqualsIgnoreCase": "StringEqualsIgnoreCase",
}


def _condition(operator: str, key: str, policy_values: Sequence[Any], context: Mapping[str, tuple[str, ...]]) -> bool:
    """One key of one operator, with IAM's rules for absent keys, IfExists and the set prefixes."""
    values = context.get(key)
    filled = [with_variables(str(v).lower() if isinstance(v, bool) else str(v), context) for v in policy_values]
    wanted = [w for w in filled if w is not None]  # a value naming a missing variable matches nothing
    if operator == "Null":
        return (values is None) == (wanted[0].lower() == "true")
    quantifier, _, base = operator.rpartition(":")
    if_exists = base.endswith("IfExists")
    base = base.removesuffix("IfExists")
    negated = base in _NEGATED
    base = _NEGATED.get(base, base)
    if quantifier == "ForAllValues":
        return all(any(_compare(base, w, v) for w in wanted) != negated for v in values or ())
    if quantifier == "ForAnyValue":
        return any(any(_compare(base, w, v) for w in wanted) != negated for v in values or ())
    if values is None:
        return if_exists or negated
    matched = any(_compare(base, w, v) for w in wanted for v in values)
    return matched != negated


def statement_applies(statement: Statement, request: Request) -> bool:
    """True when the statement covers the request's action, resource and conditions."""
    if "Action" in statement:
        if not any(_like(a, request.action, ignore_case=True) for a in _as_list(statement["Action"])):
            return False
    elif any(_like(a, request.action, ignore_case=True) for a in _as_list(statement.get("NotAction", []))):
        return False

    def resources(key: str) -> list[str]:
        filled = (with_variables(r, request.context) for r in _as_list(statement.get(key, [])))
        return [r for r in filled if r is not None]

    if "Resource" in statement:
        if not any(_like(r, request.resource) for r in resources("Resource")):
            return False
    elif any(_like(r, request.resource) for r in resources("NotResource")):
        return False
    for operator, keys in (statement.get("Condition") or {}).items():
        for key, wanted in keys.items():
            if not _condition(operator, key, _as_list(wanted), request.context):
                return False
    return True


def principal_applies(statement: Statement, principal_arn: str) -> bool:
    """True when a resource policy statement's Principal covers the caller: "*", the caller's ARN,
    or its account (an account ID or its :root ARN: the account delegates to its own policies)."""
    given = statement.get("Principal")
    if given == "*":
        return True
    account = principal_arn.split(":")[4]
    names = _as_list(given.get("AWS", [])) if isinstance(given, dict) else []
    return any(name in ("*", account, principal_arn) or name.endswith(f":iam::{account}:root") for name in names)


@dataclass(frozen=True)
class Policy:
    """A role's identity policy statements, each named (policy name and Sid or position), and for a
    role principals assume, its trust policy's statements (whom it trusts is this account: only the
    conditions are evaluated, on the AssumeRole and TagSession requests)."""

    statements: tuple[tuple[str, Statement], ...]
    trust: tuple[Statement, ...] = ()

    def allowing(self, request: Request) -> list[str]:
        """Names of the Allow statements covering the request; empty when it is refused (no Allow,
        or an explicit Deny)."""
        applying = [(name, s) for name, s in self.statements if statement_applies(s, request)]
        if any(s.get("Effect") == "Deny" for _, s in applying):
            return []
        return [name for name, s in applying if s.get("Effect") == "Allow"]


# ---- roles rendered from the translated template ------------------------------------------------
def resolve(node: Any, refs: Mapping[str, Any], conditions: Mapping[str, bool]) -> Any:
    """node with Ref, Fn::GetAtt, Fn::Sub, Fn::Join, Fn::Select, Fn::Split and Fn::If replaced by
    the values in refs ("Name" for Ref, "Name.Attr" for GetAtt); an unknown name is a KeyError."""
    if isinstance(node, list):
        resolved = [resolve(item, refs, conditions) for item in node]
        return [item for item in resolved if item is not _NO_VALUE]
    if not isinstance(node, dict):
        return node
    if len(node) == 1:
        [(key, value)] = node.items()
        if key == "Ref":
            return _NO_VALUE if value == "AWS::NoValue" else refs[value]
        if key == "Fn::GetAtt":
            name, attribute = value if isinstance(value, list) else value.split(".", 1)
            return refs[f"{name}.{attribute}"]
        if key == "Fn::Sub":
            text, variables = (value, {}) if isinstance(value, str) else value
            local = {k: resolve(v, refs, conditions) for k, v in variables.items()}
            text = re.sub(r"\$\{([^}!]+)\}", lambda m: str(local[m.group(1)] if m.group(1) in local else refs[m.group(1)]), text)
            return text.replace("${!", "${")  # ${!Literal} is Fn::Sub's escape for a literal ${Literal}
        if key == "Fn::Join":
            separator, items = value
            return separator.join(str(i) for i in _as_list(resolve(items, refs, conditions)))
        if key == "Fn::Select":
            index, items = resolve(value, refs, conditions)
            return _as_list(items)[int(index)]
        if key == "Fn::Split":
            separator, text = resolve(value, refs, conditions)
            return text.split(separator)
        if key == "Fn::If":
            name, when_true, when_false = value
            return resolve(when_true if conditions[name] else when_false, refs, conditions)
    return {k: resolve(v, refs, conditions) for k, v in node.items()}


_NO_VALUE = object()


def evaluate_conditions(template: Mapping[str, Any], refs: Mapping[str, Any]) -> dict[str, bool]:
    """The template's Conditions (Fn::Equals, Fn::Not, Fn::And, Fn::Or, Condition) with refs."""
    definitions = template.get("Conditions", {})
    done: dict[str, bool] = {}

    def value(node: Any) -> Any:
        if isinstance(node, dict) and len(node) == 1:
            [(key, arg)] = node.items()
            if key == "Fn::Equals":
                return value(arg[0]) == value(arg[1])
            if key == "Fn::Not":
                return not value(arg[0])
            if key == "Fn::And":
                return all(value(a) for a in arg)
            if key == "Fn::Or":
                return any(value(a) for a in arg)
            if key == "Condition":
                return named(arg)
        return resolve(node, refs, {})

    def named(name: str) -> bool:
        if name not in done:
            done[name] = bool(value(definitions[name]))
        return done[name]

    for name in definitions:
        named(name)
    return done


def function_policies(template: Mapping[str, Any], refs: Mapping[str, Any]) -> dict[str, Policy]:
    """The inline policies of every Lambda function's role in a translated template, resolved with
    refs, keyed by the function's code directory (functions/<name>/ -> name). AWS managed policies
    (log and X-Ray writes) are left out: no handler calls those APIs itself."""
    resources = template["Resources"]
    conditions = evaluate_conditions(template, refs)
    return {
        resource["Properties"]["Code"]["S3Key"].rstrip("/").rsplit("/", 1)[-1]: role_policy(
            template, resource["Properties"]["Role"]["Fn::GetAtt"][0], refs, conditions
        )
        for resource in resources.values()
        if resource["Type"] == "AWS::Lambda::Function"
    }


def task_policies(template: Mapping[str, Any], refs: Mapping[str, Any]) -> dict[str, Policy]:
    """The inline policies of every ECS task definition's task role (what the task's own code may
    call; the execution role is ECS's, to pull the image and write logs), resolved with refs, keyed
    by the task definition's family."""
    resources = template["Resources"]
    conditions = evaluate_conditions(template, refs)
    return {
        resolve(resource["Properties"]["Family"], refs, conditions): role_policy(
            template, resource["Properties"]["TaskRoleArn"]["Fn::GetAtt"][0], refs, conditions
        )
        for resource in resources.values()
        if resource["Type"] == "AWS::ECS::TaskDefinition" and conditions.get(resource.get("Condition", ""), True)
    }


def assumable_policies(template: Mapping[str, Any], refs: Mapping[str, Any]) -> dict[str, Policy]:
    """The inline policies of the template's roles that principals (not services) assume, keyed by
    the role's ARN in refs (RoleLogicalId.Arn): what calls signed with their sessions may do."""
    resources = template["Resources"]
    conditions = evaluate_conditions(template, refs)
    found = {}
    for logical, resource in resources.items():
        if resource["Type"] != "AWS::IAM::Role":
            continue
        trust = _as_list(resolve(resource["Properties"]["AssumeRolePolicyDocument"]["Statement"], refs, conditions))
        if any("AWS" in (statement.get("Principal") or {}) for statement in trust):
            policy = role_policy(template, logical, refs, conditions)
            found[refs[f"{logical}.Arn"]] = Policy(policy.statements, tuple(trust))
    return found


def role_policy(template: Mapping[str, Any], role: str, refs: Mapping[str, Any], conditions: Mapping[str, bool]) -> Policy:
    """The inline policies of the template's role `role` (logical ID), resolved with refs, one named
    statement per grant."""
    properties = template["Resources"][role]["Properties"]
    statements = []
    for policy in properties.get("Policies", []):
        # Resolved as a list: a statement under Fn::If may be AWS::NoValue and drop out.
        for position, statement in enumerate(_as_list(resolve(policy["PolicyDocument"]["Statement"], refs, conditions))):
            statements.append((f"{policy['PolicyName']}/{statement.get('Sid', position)}", statement))
    return Policy(tuple(statements))


# ---- the recorder -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Call:
    """One AWS call a handler made, and what its role's policy said of each request in it."""

    function: str
    service: str
    operation: str
    requests: tuple[Request, ...]
    allowed_by: tuple[tuple[str, ...], ...]  # per request, the Allow statements covering it
    denied: str | None  # the AccessDenied message the twin answered, None when allowed
    role: str | None = None  # the ARN of the role the function assumed and signed this call with

    def __str__(self) -> str:
        return f"{self.function}: {self.service}.{self.operation} " + ", ".join(
            f"{r.action} on {r.resource}" for r in self.requests
        )


@dataclass(frozen=True)
class AssumedSession:
    """A role session a function made (sts:AssumeRole): the role and the session's name and tags."""

    role: str
    name: str
    tags: Mapping[str, str]

    def context(self) -> dict[str, tuple[str, ...]]:
        """The condition keys every call of the session carries (aws:PrincipalTag/<key>)."""
        return {f"aws:PrincipalTag/{k}": (v,) for k, v in self.tags.items()}


class Enforcer:
    """Records every call of a twin function and refuses what its role would be refused."""

    def __init__(self, policies: Mapping[str, Policy], names: Names, object_exists: Callable[[str, str], bool]) -> None:
        self.policies = dict(policies)  # by function name, and by role ARN for the roles functions assume
        self.names = names
        self.object_exists = object_exists
        self.calls: list[Call] = []
        self.sessions: dict[str, AssumedSession] = {}  # by access key id, made in this process
        self._lock = threading.Lock()

    def decide(
        self, function: str, service: str, operation: str, params: Mapping[str, Any], access_key: str | None = None
    ) -> Call:
        """Evaluate one call of function against its role, or against the role whose session's
        credentials (access_key) signed it; record it."""
        session = self.sessions.get(access_key or "")
        policy = self.policies.get(session.role if session else function, Policy(()))
        requests = tuple(requests_of(service, operation, params, self.names))
        if session is not None:
            requests = tuple(replace(r, context={**r.context, **session.context()}) for r in requests)
        allowed_by = tuple(tuple(policy.allowing(r)) if self.trusted(r) else () for r in requests)
        denied = None
        refused = next((r for r, by in zip(requests, allowed_by, strict=True) if not by), None)
        role = f"arn:aws:sts::{self.names.account}:assumed-role/servingctl-{function}/servingctl-{function}"
        if session is not None:
            role = f"arn:aws:sts::{self.names.account}:assumed-role/{session.role.rsplit('/', 1)[-1]}/{session.name}"
        if refused is not None:
            denied = (
                f"User: {role} is not authorized to perform: {refused.action} on resource: {refused.resource} "
                f"because no identity-based policy allows the {refused.action} action"
            )
        elif (
            service == "s3"
            and operation in ("GetObject", "HeadObject")
            and not self.object_exists(params["Bucket"], params["Key"])
        ):
            # S3 tells "no such key" only to a caller that may list the bucket. Which request context
            # that implicit check sees is not documented: the twin assumes none (no s3:prefix), the
            # reading under which a prefix-conditioned grant does not help.
            listing = Request("s3:ListBucket", f"arn:aws:s3:::{params['Bucket']}")
            if not policy.allowing(listing):
                denied = "Access Denied"
        call = Call(function, service, operation, requests, allowed_by, denied, session.role if session else None)
        self.record(call)
        return call

    def trusted(self, request: Request) -> bool:
        """False for an AssumeRole or TagSession the target role's trust policy refuses (its
        conditions: STS checks both the caller's policy and the role's trust)."""
        target = self.policies.get(request.resource) if request.action in ("sts:AssumeRole", "sts:TagSession") else None
        if target is None or not target.trust:
            return True
        return bool(
            Policy(
                tuple((str(i), {k: v for k, v in st.items() if k != "Principal"}) for i, st in enumerate(target.trust))
            ).allowing(request)
        )

    def assumed(self, access_key: str, params: Mapping[str, Any]) -> None:
        """Note the session an allowed AssumeRole (params) answered with credentials access_key."""
        tags = {t["Key"]: t["Value"] for t in params.get("Tags") or []}
        with self._lock:
            self.sessions[access_key] = AssumedSession(params["RoleArn"], params["RoleSessionName"], tags)

    def record(self, call: Call) -> None:
        """Keep a decided call (from here, or decided in a Lambda worker or an ECS task process)."""
        with self._lock:
            self.calls.append(call)


# The deciding enforcer of each twin, by the region it plays (each twin claims its own), so two twins
# in one process decide apart; None: the process's only one (a Lambda worker, an ECS task process).
# botocore's hooks are per process, so the registry is too.
_enforcers: dict[str | None, Enforcer] = {}
_process_caller: str | None = None  # who calls when CALLER names nobody (a whole process: an ECS task)
_installed = threading.Lock()
_hooks_installed: list[bool] = []


def _enforcer(context: Mapping[str, Any]) -> Enforcer | None:
    """The enforcer of the region the client calls (botocore's request context names it)."""
    return _enforcers.get(context.get("client_region")) or _enforcers.get(None)


def _note_call(params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
    """before-parameter-build (registered last, after boto3's DynamoDB transforms): keep the call's
    parameters for before-call, where the credentials that sign it are known."""
    function, enforcer = CALLER.get() or _process_caller, _enforcer(context)
    if function is None or enforcer is None:
        return
    if context.get("is_presign_request"):
        # A presigned URL is authorised when it is used, against its signer's policy: decided here,
        # where generate_presigned_url stops (no before-call); a refused one is recorded as such.
        enforcer.decide(function, model.service_model.service_name, model.name, params)
        return
    context["servingctl_params"] = dict(params)


def _refuse(
    model: Any, context: dict[str, Any], request_signer: Any = None, **_: Any
) -> tuple[AWSResponse, dict[str, Any]] | None:
    """before-call: decide the call (as the function, or as the role whose session signs it) and
    answer a refused one with AccessDenied instead of sending it."""
    function, enforcer, params = CALLER.get() or _process_caller, _enforcer(context), context.get("servingctl_params")
    if function is None or enforcer is None or params is None:
        return None
    # The signer's credentials (botocore keeps them private; refreshable ones refresh on this read).
    credentials = getattr(request_signer, "_credentials", None)
    access_key = credentials.get_frozen_credentials().access_key if credentials is not None else None
    call = enforcer.decide(function, model.service_model.service_name, model.name, params, access_key)
    if call.denied is None:
        return None
    service = model.service_model.service_name
    code = DENIED_CODE.get(service, "AccessDeniedException")
    parsed = {"Error": {"Code": code, "Message": call.denied}, "ResponseMetadata": {"HTTPStatusCode": 403, "HTTPHeaders": {}}}
    return AWSResponse("", 403, HTTPHeaders(), None), parsed


def _note_session(parsed: Mapping[str, Any], context: dict[str, Any], **_: Any) -> None:
    """after-call.sts.AssumeRole: remember which role and tags the returned credentials carry."""
    params, enforcer = context.get("servingctl_params"), _enforcer(context)
    if params is None or enforcer is None or "Credentials" not in parsed:
        return
    enforcer.assumed(parsed["Credentials"]["AccessKeyId"], params)


# (event, handler, position): a before-call handler may return a response, so handlers return Any.
_HOOKS: tuple[tuple[str, Callable[..., Any], object], ...] = (
    ("before-parameter-build", _note_call, botocore.handlers.REGISTER_LAST),
    ("before-call", _refuse, botocore.handlers.REGISTER_LAST),
    ("after-call.sts.AssumeRole", _note_session, botocore.handlers.REGISTER_LAST),
)


def _install_hooks() -> None:
    """Register the hooks once: on every botocore session made from now on (Powertools makes its
    own) and on boto3's default session, which the handlers' boto3.client() calls use."""
    with _installed:
        if _hooks_installed:
            return
        if boto3.DEFAULT_SESSION is None:  # made before the handlers extend: it gets them once, below
            boto3.setup_default_session()
        botocore.handlers.BUILTIN_HANDLERS.extend(_HOOKS)
        assert boto3.DEFAULT_SESSION is not None
        for event, handler, _ in _HOOKS:
            boto3.DEFAULT_SESSION.events.register_last(event, handler)
        _hooks_installed.append(True)


def activate(enforcer: Enforcer | None, region: str | None = None) -> None:
    """Make enforcer decide the twin functions' calls to region from now on (None: nobody decides
    there); no region: every call of this process (a Lambda worker, an ECS task)."""
    if enforcer is None:
        _enforcers.pop(region, None)
        return
    _install_hooks()
    _enforcers[region] = enforcer


def run_as(caller: str) -> None:
    """Every AWS call of this process, from any thread, runs as `caller` (its policy decides them)."""
    global _process_caller
    _process_caller = caller


@contextlib.contextmanager
def calling(function: str) -> Iterator[None]:
    """AWS calls made inside run as the twin function `function` (its role decides them)."""
    token = CALLER.set(function)
    try:
        yield
    finally:
        CALLER.reset(token)
