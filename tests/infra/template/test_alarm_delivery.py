"""Alarms reach someone: every CloudWatch alarm action and every EventBridge rule target that is an SNS
topic of the template can publish to it, which for an encrypted topic means the topic's KMS key policy
lets the publishing service use the key for a request as AWS makes it.

What AWS does (SNS developer guide, "Enable compatibility between event sources from AWS services and
encrypted topics"; re:Post "configure a CloudWatch alarm with an encrypted SNS topic"): SNS encrypts a
message with a data key the publisher's service principal has KMS generate, so the key policy must
allow that principal kms:GenerateDataKey* and kms:Decrypt. The AWS managed key alias/aws/sns grants
no service principal and its policy cannot be changed: alarms publishing to a topic under it fail
("CloudWatch Alarms does not have authorization to access the SNS topic encryption key").
CloudWatch's requests carry aws:SourceAccount and aws:SourceArn (the alarm's ARN); EventBridge's carry
neither, so a statement conditioned on them refuses EventBridge. An alarm without AlarmName gets a
name CloudFormation makes up, which no name pattern can be relied on to match.

The key policy is evaluated with the twin's IAM evaluator (servingctl_twin.iam), after the
template's intrinsics are resolved for a stack named STACK in ACCOUNT/REGION."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from servingctl_twin.iam import Request, evaluate_conditions, resolve, statement_applies

ACCOUNT, REGION, PARTITION, STACK = "123456789012", "us-east-1", "aws", "servingctl-prod"
ALARM_ACTIONS = ("AlarmActions", "OKActions", "InsufficientDataActions")
# What SNS needs of the key on a publisher's behalf.
NEEDED = ("kms:GenerateDataKey", "kms:Decrypt")


class _Refs(dict):
    """Pseudo parameters of the stack; any logical ID or attribute stands for itself."""

    def __missing__(self, name: str) -> str:
        return name


REFS = _Refs(
    {
        "AWS::AccountId": ACCOUNT,
        "AWS::Region": REGION,
        "AWS::Partition": PARTITION,
        "AWS::StackName": STACK,
        "AWS::URLSuffix": "amazonaws.com",
    }
)


@dataclass(frozen=True)
class Delivery:
    """One publisher -> topic path, and why it fails (None: it delivers)."""

    source: str
    topic: str
    refused: str | None


def _key_policy(template: dict[str, Any], key_id: Any) -> tuple[str, list[dict[str, Any]]] | str:
    """(key logical ID, its policy statements) for a topic's KmsMasterKeyId, or why none can grant."""
    resources = template["Resources"]
    if isinstance(key_id, str):
        if key_id.split(":")[-1].startswith("alias/aws/"):
            return f"{key_id} is an AWS managed key: its policy grants no service principal and cannot be changed"
        return f"{key_id} is a key outside the template: its policy cannot be checked"
    name = key_id.get("Ref") or (key_id.get("Fn::GetAtt") or [None])[0]
    resource = resources.get(name) or {}
    if resource.get("Type") == "AWS::KMS::Alias":
        return _key_policy(template, resource["Properties"]["TargetKeyId"])
    if resource.get("Type") != "AWS::KMS::Key":
        return f"{key_id} is not a KMS key of the template"
    conditions = evaluate_conditions(template, REFS)
    statements = resolve(resource["Properties"]["KeyPolicy"]["Statement"], REFS, conditions)
    return name, statements if isinstance(statements, list) else [statements]


def _covers_principal(statement: dict[str, Any], service: str) -> bool:
    principal = statement.get("Principal")
    if principal == "*" or (isinstance(principal, dict) and principal.get("AWS") == "*"):
        return True
    services = principal.get("Service", []) if isinstance(principal, dict) else []
    return service in (services if isinstance(services, list) else [services])


def _refusal(template: dict[str, Any], topic: str, service: str, context: dict[str, tuple[str, ...]]) -> str | None:
    """Why service cannot publish to the topic for a request with context (None: it can)."""
    resource = template["Resources"].get(topic) or {}
    if resource.get("Type") != "AWS::SNS::Topic":
        return None  # not a topic of the template: nothing to check here
    key_id = (resource.get("Properties") or {}).get("KmsMasterKeyId")
    if key_id is None:
        return None  # unencrypted: no key in the way
    found = _key_policy(template, key_id)
    if isinstance(found, str):
        return found
    key, statements = found
    for action in NEEDED:
        request = Request(action, f"arn:{PARTITION}:kms:{REGION}:{ACCOUNT}:key/{key}", context)
        applying = [s for s in statements if _covers_principal(s, service) and statement_applies(s, request)]
        if any(s.get("Effect") == "Deny" for s in applying) or not any(s.get("Effect") == "Allow" for s in applying):
            return f"{key}'s policy does not allow {service} {action} for {dict(context) or 'a request without source keys'}"
    return None


def deliveries(template: dict[str, Any]) -> Iterator[Delivery]:
    """Every alarm action and rule target that names a resource, with its verdict."""
    conditions = evaluate_conditions(template, REFS)
    for name, resource in template["Resources"].items():
        if not conditions.get(resource.get("Condition", ""), True):
            continue
        props = resource.get("Properties") or {}
        if resource["Type"] == "AWS::CloudWatch::Alarm":
            alarm = (
                resolve(props["AlarmName"], REFS, conditions)
                if "AlarmName" in props
                else f"<made up by CloudFormation for {name}>"
            )
            context = {
                "aws:SourceAccount": (ACCOUNT,),
                "aws:SourceArn": (f"arn:{PARTITION}:cloudwatch:{REGION}:{ACCOUNT}:alarm:{alarm}",),
            }
            for kind in ALARM_ACTIONS:
                for action in props.get(kind, []):
                    if isinstance(action, dict) and "Ref" in action:
                        yield Delivery(
                            f"{name}.{kind}",
                            action["Ref"],
                            _refusal(template, action["Ref"], "cloudwatch.amazonaws.com", context),
                        )
        elif resource["Type"] == "AWS::Events::Rule":
            for target in props.get("Targets", []):
                arn = target.get("Arn")
                if isinstance(arn, dict) and "Ref" in arn:
                    yield Delivery(
                        f"{name}.{target.get('Id')}", arn["Ref"], _refusal(template, arn["Ref"], "events.amazonaws.com", {})
                    )


def _refused(template: dict[str, Any]) -> dict[str, str]:
    return {d.source: d.refused for d in deliveries(template) if d.refused}


def test_every_alarm_publishes_to_a_topic_whose_key_lets_it(template: dict[str, Any]) -> None:
    found = list(deliveries(template))
    alarms = [n for n, r in template["Resources"].items() if r["Type"] == "AWS::CloudWatch::Alarm"]
    assert {d.source.split(".")[0] for d in found} >= set(alarms) and len(alarms) >= 10
    assert _refused(template) == {}


def test_the_key_rotates_and_the_account_administers_it(template: dict[str, Any]) -> None:
    topic = template["Resources"]["AlarmTopic"]["Properties"]
    key = template["Resources"][topic["KmsMasterKeyId"]["Ref"]]["Properties"]
    assert key["EnableKeyRotation"] is True
    [admin] = [s for s in key["KeyPolicy"]["Statement"] if s["Action"] == "kms:*"]
    assert resolve(admin["Principal"], REFS, {}) == {"AWS": f"arn:aws:iam::{ACCOUNT}:root"}
    # Every other statement names a service and is scoped to this account's requests.
    services = [s for s in key["KeyPolicy"]["Statement"] if s is not admin]
    assert services and all(
        set(s["Principal"]) == {"Service"} and "aws:SourceAccount" in s["Condition"]["StringEquals"] for s in services
    )


def _with(template: dict[str, Any], change: Any) -> dict[str, Any]:
    changed = copy.deepcopy(template)
    change(changed["Resources"])
    return changed


def _key(resources: dict[str, Any]) -> dict[str, Any]:
    return resources[resources["AlarmTopic"]["Properties"]["KmsMasterKeyId"]["Ref"]]["Properties"]


def _drop_cloudwatch(resources: dict[str, Any]) -> None:
    _key(resources)["KeyPolicy"]["Statement"] = [
        s for s in _key(resources)["KeyPolicy"]["Statement"] if "cloudwatch.amazonaws.com" not in str(s.get("Principal"))
    ]


def _other_account(resources: dict[str, Any]) -> None:
    for statement in _key(resources)["KeyPolicy"]["Statement"]:
        if "Condition" in statement:
            statement["Condition"]["StringEquals"]["aws:SourceAccount"] = "999999999999"


def _unnamed_alarm(resources: dict[str, Any]) -> None:
    del resources["StopProfileFailedAlarm"]["Properties"]["AlarmName"]


def _decrypt_only(resources: dict[str, Any]) -> None:
    for statement in _key(resources)["KeyPolicy"]["Statement"]:
        if statement.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}:
            statement["Action"] = ["kms:Decrypt"]


@pytest.mark.parametrize(
    ("change", "refused", "why"),
    [
        # The template before this check: the AWS managed key, which no alarm can use.
        (
            lambda r: r["AlarmTopic"]["Properties"].update(KmsMasterKeyId="alias/aws/sns"),
            "all",
            "alias/aws/sns is an AWS managed key",
        ),
        (_drop_cloudwatch, "all", "does not allow cloudwatch.amazonaws.com kms:GenerateDataKey"),
        (_decrypt_only, "all", "does not allow cloudwatch.amazonaws.com kms:GenerateDataKey"),
        (_other_account, "all", "does not allow cloudwatch.amazonaws.com"),
        (_unnamed_alarm, "StopProfileFailedAlarm.AlarmActions", "made up by CloudFormation for StopProfileFailedAlarm"),
    ],
)
def test_the_check_refuses_what_aws_refuses(template: dict[str, Any], change: Any, refused: str, why: str) -> None:
    found = _refused(_with(template, change))
    alarms = {d.source for d in deliveries(template)}
    assert set(found) == (alarms if refused == "all" else {refused})
    assert all(why in reason for reason in found.values())


def _rule_to_topic(resources: dict[str, Any]) -> None:
    resources["NotifyRule"] = {
        "Type": "AWS::Events::Rule",
        "Properties": {"EventPattern": {"source": ["aws.states"]}, "Targets": [{"Id": "notify", "Arn": {"Ref": "AlarmTopic"}}]},
    }


def _events_statement(condition: dict[str, Any] | None) -> Any:
    def change(resources: dict[str, Any]) -> None:
        _rule_to_topic(resources)
        statement = {
            "Effect": "Allow",
            "Principal": {"Service": "events.amazonaws.com"},
            "Action": ["kms:Decrypt", "kms:GenerateDataKey*"],
            "Resource": "*",
        }
        _key(resources)["KeyPolicy"]["Statement"].append(statement | ({"Condition": condition} if condition else {}))

    return change


@pytest.mark.parametrize(
    ("change", "refused"),
    [
        (_rule_to_topic, True),  # a rule publishing to the topic needs its own grant
        (
            _events_statement({"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}),
            True,
        ),  # EventBridge sends no source keys
        (_events_statement(None), False),
    ],
)
def test_an_eventbridge_rule_publishing_to_the_topic_needs_an_unconditioned_grant(
    template: dict[str, Any], change: Any, refused: bool
) -> None:
    found = _refused(_with(template, change))
    assert set(found) == ({"NotifyRule.notify"} if refused else set())
    assert all("events.amazonaws.com" in reason for reason in found.values())
