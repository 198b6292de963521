"""The twin's IAM evaluator (servingctl_twin.iam): IAM's rules for wildcards, explicit denies,
absent condition keys and the set operators, each at its limit and one past it; what a call's
parameters become (resource ARNs, condition keys); S3's answer for a missing key."""

from __future__ import annotations

import boto3
import pytest
from boto3.dynamodb.conditions import ConditionExpressionBuilder, Key
from boto3.dynamodb.types import TypeSerializer
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from servingctl.store.records import S3RecordStore
from servingctl_twin.iam import Enforcer, Names, Policy, Request, iam_action, requests_of, statement_applies

TABLE = "arn:aws:dynamodb:us-east-1:123456789012:table/servingctl"
NAMES = Names(
    account="123456789012",
    region="us-east-1",
    partition_keys={"servingctl": "pk"},
    asg_arn=lambda name: f"arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:uuid:autoScalingGroupName/{name}",
    asg_tags=lambda name: {"servingctl:pool": "g7e-1gpu"},
)


def _allow(**statement: object) -> dict[str, object]:
    return {"Effect": "Allow", **statement}


@pytest.mark.parametrize(("size", "allowed"), [("1", True), ("2", False)])
def test_numeric_condition_at_the_limit_and_one_past(size: str, allowed: bool) -> None:
    statement = _allow(
        Action="autoscaling:UpdateAutoScalingGroup",
        Resource="*",
        Condition={"NumericLessThanEquals": {"autoscaling:MaxSize": "1"}},
    )
    assert (
        statement_applies(statement, Request("autoscaling:UpdateAutoScalingGroup", "x", {"autoscaling:MaxSize": (size,)}))
        is allowed
    )


def test_an_absent_key_fails_a_condition_unless_if_exists_or_null_says_so() -> None:
    request = Request("autoscaling:UpdateAutoScalingGroup", "x", {"autoscaling:MinSize": ("0",)})
    assert not statement_applies(
        _allow(Action="*", Resource="*", Condition={"NumericEquals": {"autoscaling:MaxSize": "1"}}), request
    )
    assert statement_applies(
        _allow(Action="*", Resource="*", Condition={"NumericEqualsIfExists": {"autoscaling:MaxSize": "1"}}), request
    )
    assert statement_applies(_allow(Action="*", Resource="*", Condition={"Null": {"autoscaling:MaxSize": "true"}}), request)
    assert not statement_applies(_allow(Action="*", Resource="*", Condition={"Null": {"autoscaling:MinSize": "true"}}), request)


def test_leading_keys_for_all_values_allows_only_the_listed_partitions() -> None:
    statement = _allow(
        Action="dynamodb:GetItem",
        Resource=TABLE,
        Condition={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["profile", "run"]}},
    )
    assert statement_applies(statement, Request("dynamodb:GetItem", TABLE, {"dynamodb:LeadingKeys": ("profile",)}))
    assert not statement_applies(statement, Request("dynamodb:GetItem", TABLE, {"dynamodb:LeadingKeys": ("lock",)}))
    assert not statement_applies(statement, Request("dynamodb:GetItem", TABLE, {"dynamodb:LeadingKeys": ("profile", "lock")}))
    # IAM's rule: ForAllValues over no values is true (a Scan carries no leading key).
    assert statement_applies(statement, Request("dynamodb:GetItem", TABLE))


def test_wildcards_and_an_explicit_deny() -> None:
    policy = Policy(
        (
            ("read", _allow(Action="s3:Get*", Resource="arn:aws:s3:::b/runs/*")),
            ("deny", {"Effect": "Deny", "Action": "s3:*", "Resource": "arn:aws:s3:::b/runs/secret*"}),
        )
    )
    assert policy.allowing(Request("s3:GetObject", "arn:aws:s3:::b/runs/x/y.gz")) == ["read"]
    assert policy.allowing(Request("s3:getobject", "arn:aws:s3:::b/runs/x")) == ["read"]  # actions ignore case
    assert policy.allowing(Request("s3:GetObject", "arn:aws:s3:::b/other")) == []
    assert policy.allowing(Request("s3:GetObject", "arn:aws:s3:::b/runs/secret.gz")) == []


def test_a_query_is_evaluated_on_its_partition_key_value() -> None:
    # What boto3's resource layer sends for Key("pk").eq(...) & Key("sk").begins_with(...).
    built = ConditionExpressionBuilder().build_expression(Key("pk").eq("run#r1") & Key("sk").begins_with("scenario#"), True)
    params = {
        "TableName": "servingctl",
        "KeyConditionExpression": built.condition_expression,
        "ExpressionAttributeNames": built.attribute_name_placeholders,
        "ExpressionAttributeValues": {k: TypeSerializer().serialize(v) for k, v in built.attribute_value_placeholders.items()},
    }
    [request] = requests_of("dynamodb", "Query", params, NAMES)
    assert request == Request("dynamodb:Query", TABLE, {"dynamodb:LeadingKeys": ("run#r1",)})


def test_calls_become_actions_arns_and_condition_keys() -> None:
    [update] = requests_of(
        "autoscaling", "UpdateAutoScalingGroup", {"AutoScalingGroupName": "g", "MinSize": 0, "DesiredCapacity": 0}, NAMES
    )
    assert update.resource.endswith(":autoScalingGroupName/g")
    assert update.context == {
        "aws:ResourceTag/servingctl:pool": ("g7e-1gpu",),
        "autoscaling:ResourceTag/servingctl:pool": ("g7e-1gpu",),
        "autoscaling:MinSize": ("0",),
    }
    [service] = requests_of("ecs", "UpdateService", {"cluster": "c", "service": "s", "desiredCount": 1}, NAMES)
    assert service == Request(
        "ecs:UpdateService",
        "arn:aws:ecs:us-east-1:123456789012:service/c/s",
        {"ecs:cluster": ("arn:aws:ecs:us-east-1:123456789012:cluster/c",)},
    )
    [listing] = requests_of("s3", "ListObjectsV2", {"Bucket": "b", "Prefix": "runs/x"}, NAMES)
    assert listing == Request("s3:ListBucket", "arn:aws:s3:::b", {"s3:prefix": ("runs/x",)})
    assert requests_of("sts", "GetCallerIdentity", {}, NAMES) == []
    assert iam_action("cloudwatch", "GetMetricStatistics") == "cloudwatch:GetMetricStatistics"  # botocore signs as "monitoring"
    assert iam_action("stepfunctions", "StartExecution") == "states:StartExecution"


READ = ("read", _allow(Action="s3:GetObject", Resource="arn:aws:s3:::b/runs/*"))


@pytest.mark.parametrize(
    ("listing", "denied"),
    [
        (None, True),
        (_allow(Action="s3:ListBucket", Resource="arn:aws:s3:::b"), False),
        # How S3's implicit check fills s3:prefix is not documented: the twin assumes it does not.
        (_allow(Action="s3:ListBucket", Resource="arn:aws:s3:::b", Condition={"StringLike": {"s3:prefix": "runs/*"}}), True),
    ],
)
def test_s3_answers_a_missing_key_with_access_denied_unless_the_reader_may_list(listing: dict | None, denied: bool) -> None:
    statements = (READ,) if listing is None else (READ, ("list", listing))
    enforcer = Enforcer({"f": Policy(statements)}, NAMES, object_exists=lambda bucket, key: key == "runs/there")
    assert enforcer.decide("f", "s3", "GetObject", {"Bucket": "b", "Key": "runs/there"}).denied is None
    assert (enforcer.decide("f", "s3", "GetObject", {"Bucket": "b", "Key": "runs/missing"}).denied is not None) is denied


def test_a_refused_read_of_a_record_that_is_there_stays_refused() -> None:
    s3 = boto3.client("s3", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(s3) as stub:
        for listed in ([{"Key": "runs/r/a.jsonl.gz"}], []):
            stub.add_client_error("get_object", "AccessDenied", http_status_code=403)
            stub.add_response(
                "list_objects_v2", {"Contents": listed}, {"Bucket": "b", "Prefix": "runs/r/a.jsonl.gz", "MaxKeys": 1}
            )
        with pytest.raises(ClientError, match="AccessDenied"):
            S3RecordStore("b", s3).get_records("runs/r/a.jsonl.gz")
        with pytest.raises(KeyError, match=r"no records at s3://b/runs/r/a.jsonl.gz"):
            S3RecordStore("b", s3).get_records("runs/r/a.jsonl.gz")


# ---- policy variables and assumed sessions (BenchRunRole) -----------------------------------------
RUN_ROLE = "arn:aws:iam::123456789012:role/servingctl-BenchRunRole"
RUN_SCOPED = Policy(
    (
        (
            "items",
            _allow(
                Action="dynamodb:PutItem",
                Resource=TABLE,
                Condition={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["run#${aws:PrincipalTag/run}"]}},
            ),
        ),
        ("records", _allow(Action="s3:PutObject", Resource="arn:aws:s3:::b/runs/${aws:PrincipalTag/run}/*")),
    )
)


@pytest.mark.parametrize(
    ("tags", "partition", "allowed"),
    [
        ({"run": "r1"}, "run#r1", True),
        ({"run": "r1"}, "run#r2", False),
        ({"run": "r1"}, "run#r1x", False),
        ({"run": "*"}, "run#r1", False),
        ({"run": "r?"}, "run#r1", False),
        ({}, "run#r1", False),
        ({}, "run#${aws:PrincipalTag/run}", False),
    ],
)
def test_a_policy_variable_is_the_sessions_tag_taken_literally(tags: dict[str, str], partition: str, allowed: bool) -> None:
    context = {f"aws:PrincipalTag/{k}": (v,) for k, v in tags.items()}
    assert (
        bool(RUN_SCOPED.allowing(Request("dynamodb:PutItem", TABLE, {"dynamodb:LeadingKeys": (partition,), **context})))
        is allowed
    )
    key = f"runs/{partition.removeprefix('run#')}/x.jsonl.gz"
    assert bool(RUN_SCOPED.allowing(Request("s3:PutObject", f"arn:aws:s3:::b/{key}", context))) is allowed


def test_assume_role_with_tags_is_authorised_as_assume_and_tag_session() -> None:
    params = {"RoleArn": RUN_ROLE, "RoleSessionName": "bench-r1", "Tags": [{"Key": "run", "Value": "r1"}]}
    assume, tag = requests_of("sts", "AssumeRole", params, NAMES)
    tags = {"aws:RequestTag/run": ("r1",), "aws:TagKeys": ("run",)}
    assert (assume, tag) == (Request("sts:AssumeRole", RUN_ROLE, tags), Request("sts:TagSession", RUN_ROLE, tags))
    assert requests_of("sts", "AssumeRole", {"RoleArn": RUN_ROLE, "RoleSessionName": "s"}, NAMES) == [
        Request("sts:AssumeRole", RUN_ROLE)
    ]


def test_calls_signed_by_an_assumed_session_are_decided_by_that_roles_policy() -> None:
    worker = Policy((("assume", _allow(Action=["sts:AssumeRole", "sts:TagSession"], Resource=RUN_ROLE)),))
    enforcer = Enforcer({"bench_worker": worker, RUN_ROLE: RUN_SCOPED}, NAMES, lambda bucket, key: True)
    put = {"TableName": "servingctl", "Item": {"pk": {"S": "run#r1"}, "sk": {"S": "run"}}}
    # The function's own credentials: its own policy, which has no table access.
    assert enforcer.decide("bench_worker", "dynamodb", "PutItem", put, "AKIDFUNCTION").denied
    enforcer.assumed("ASIASESSION", {"RoleArn": RUN_ROLE, "RoleSessionName": "bench-r1", "Tags": [{"Key": "run", "Value": "r1"}]})
    call = enforcer.decide("bench_worker", "dynamodb", "PutItem", put, "ASIASESSION")
    assert call.denied is None and call.role == RUN_ROLE and call.allowed_by == (("items",),)
    other = enforcer.decide(
        "bench_worker", "dynamodb", "PutItem", {**put, "Item": {"pk": {"S": "run#r2"}, "sk": {"S": "run"}}}, "ASIASESSION"
    )
    assert other.denied is not None and "assumed-role/servingctl-BenchRunRole/bench-r1" in other.denied


def test_a_query_of_an_index_is_authorised_on_the_index_with_its_own_partition_key() -> None:
    expression = ConditionExpressionBuilder().build_expression(Key("lpk").eq("run"), is_key_condition=True)
    params = {
        "TableName": "servingctl",
        "IndexName": "listing",
        "KeyConditionExpression": expression.condition_expression,
        "ExpressionAttributeNames": expression.attribute_name_placeholders,
        "ExpressionAttributeValues": {
            k: TypeSerializer().serialize(v) for k, v in expression.attribute_value_placeholders.items()
        },
    }
    [request] = requests_of("dynamodb", "Query", params, NAMES)
    assert request == Request("dynamodb:Query", f"{TABLE}/index/listing", {"dynamodb:LeadingKeys": ("run",)})


@pytest.mark.parametrize(
    ("tags", "allowed"),
    [
        ([{"Key": "run", "Value": "r1"}, {"Key": "profile", "Value": "p"}], True),
        ([{"Key": "run", "Value": "r1"}], True),
        ([], False),
        ([{"Key": "run", "Value": ""}], False),
        ([{"Key": "run", "Value": "r1"}, {"Key": "owner", "Value": "x"}], False),
    ],
)
def test_assuming_a_role_meets_its_trust_policys_conditions(tags: list[dict[str, str]], allowed: bool) -> None:
    # BenchRunRole's trust: a run tag is required, no tag key but run and profile.
    trust = (
        {
            "Effect": "Allow",
            "Principal": {"AWS": "arn:aws:iam::123456789012:root"},
            "Action": ["sts:AssumeRole", "sts:TagSession"],
            "Condition": {
                "StringLike": {"aws:RequestTag/run": "?*"},
                "ForAllValues:StringEquals": {"aws:TagKeys": ["run", "profile"]},
            },
        },
    )
    worker = Policy((("assume", _allow(Action=["sts:AssumeRole", "sts:TagSession"], Resource=RUN_ROLE)),))
    enforcer = Enforcer({"bench_worker": worker, RUN_ROLE: Policy(RUN_SCOPED.statements, trust)}, NAMES, lambda bucket, key: True)
    call = enforcer.decide("bench_worker", "sts", "AssumeRole", {"RoleArn": RUN_ROLE, "RoleSessionName": "s", "Tags": tags})
    assert (call.denied is None) is allowed


def test_two_twins_in_one_process_decide_their_own_regions_calls() -> None:
    from servingctl_twin import iam as twin_iam

    east, west = object(), object()
    twin_iam.activate(east, "us-east-1")  # type: ignore[arg-type]  # routing only: never asked to decide
    twin_iam.activate(west, "us-west-2")  # type: ignore[arg-type]
    try:
        assert twin_iam._enforcer({"client_region": "us-east-1"}) is east
        assert twin_iam._enforcer({"client_region": "us-west-2"}) is west
        assert twin_iam._enforcer({"client_region": "eu-west-1"}) is None  # no twin plays it: nobody decides
        twin_iam.activate(None, "us-east-1")  # one twin stops; the other still decides its calls
        assert twin_iam._enforcer({"client_region": "us-east-1"}) is None
        assert twin_iam._enforcer({"client_region": "us-west-2"}) is west
    finally:
        twin_iam.activate(None, "us-east-1")
        twin_iam.activate(None, "us-west-2")
