"""Least privilege in the deployed roles: checked on the template after the SAM transform, so the
statements SAM generates (policy templates, state machine roles) are checked like the written ones.

Rules: no action wildcard in an Allow; Resource "*" only for the actions in STAR_RESOURCE_ACTIONS,
each with the reason AWS forces it (and the condition key that narrows it, where AWS has one);
AWS managed policies only from MANAGED_POLICIES. The allow-list is itself checked against
cfn-lint's copy of AWS's IAM action data, so "AWS has no resource-level permission" is not a claim
we can make up. Finally, the data-plane actions profile_steps is granted are exactly the boto3 calls
its code (the servingctl modules its handler imports) makes: no missing grant, no unused one.
"""

import ast
import json
from importlib import resources
from pathlib import Path

import botocore.session
import pytest
from botocore import xform_name

from servingctl_twin import iam

ROOT = Path(__file__).resolve().parents[3]

# action -> (why it needs Resource "*", condition key that must narrow it or None)
STAR_RESOURCE_ACTIONS: dict[str, tuple[str, str | None]] = {
    "autoscaling:DescribeAutoScalingGroups": ("Auto Scaling Describe* has no resource-level permissions", None),
    "autoscaling:DescribeScalingActivities": ("Auto Scaling Describe* has no resource-level permissions", None),
    "autoscaling:DescribeWarmPool": ("Auto Scaling Describe* has no resource-level permissions", None),
    "ec2:RunInstances": (
        "authorizes the instance, volume, ENI, subnet and image ARNs AWS picks: narrowed to the pools' templates",
        "ec2:LaunchTemplate",
    ),
    "elasticloadbalancing:DescribeTargetHealth": ("ELBv2 Describe* has no resource-level permissions", None),
    "ec2:DescribeInstances": ("EC2 Describe* has no resource-level permissions", None),
    "ecs:ListTasks": ("ListTasks is not authorized by a resource ARN in practice", "ecs:cluster"),
    "ecs:DescribeTasks": ("task ARNs carry random ids: narrowed to the cluster instead", "ecs:cluster"),
    "ecs:DescribeContainerInstances": ("instance ARNs carry random ids: narrowed to the cluster", "ecs:cluster"),
    "ecs:ListServices": ("ListServices has no resource type (the reconciler finds services by their tags)", "ecs:cluster"),
    "ecs:DescribeTaskDefinition": ("DescribeTaskDefinition has no resource-level permissions", None),
    "cloudwatch:GetMetricStatistics": ("CloudWatch metric reads have no resource-level permissions", None),
    "cloudwatch:PutMetricData": (
        "PutMetricData has no resource type: narrowed to servingctl's namespace",
        "cloudwatch:namespace",
    ),
    "logs:CreateLogDelivery": ("Step Functions log delivery: vended-log APIs take no resource", None),
    "logs:GetLogDelivery": ("Step Functions log delivery: vended-log APIs take no resource", None),
    "logs:UpdateLogDelivery": ("Step Functions log delivery: vended-log APIs take no resource", None),
    "logs:DeleteLogDelivery": ("Step Functions log delivery: vended-log APIs take no resource", None),
    "logs:ListLogDeliveries": ("Step Functions log delivery: vended-log APIs take no resource", None),
    "logs:PutResourcePolicy": ("Step Functions log delivery: vended-log APIs take no resource", None),
    "logs:DescribeResourcePolicies": ("Step Functions log delivery: vended-log APIs take no resource", None),
    "logs:DescribeLogGroups": ("Step Functions log delivery: vended-log APIs take no resource", None),
    "ecr:GetAuthorizationToken": ("the ECR login token is account-wide: no resource type", None),
}

# AWS managed policies SAM attaches, and why each is acceptable.
MANAGED_POLICIES: dict[str, str] = {
    "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole": "log writes of every function",
    "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess": "X-Ray segments (Tracing: Active / Enabled)",
    "arn:aws:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole": "ENIs of the functions in the VPC",
}

IAM_DATA = json.loads(resources.files("cfnlint.data.AdditionalSpecs").joinpath("Policies.json").read_text())


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def _branches(statement: dict) -> list[dict]:
    """A statement, or both branches of a statement under Fn::If (AWS::NoValue left out)."""
    if set(statement) != {"Fn::If"}:
        return [statement]
    return [b for b in statement["Fn::If"][1:] if b != {"Ref": "AWS::NoValue"}]


def identity_statements(cfn: dict) -> list[tuple[str, dict]]:
    """(where, statement) of every identity policy in a CloudFormation template."""
    found = []
    for name, resource in cfn["Resources"].items():
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::IAM::Role":
            for policy in props.get("Policies", []):
                found += [
                    (f"{name}/{policy['PolicyName']}", b)
                    for s in _as_list(policy["PolicyDocument"]["Statement"])
                    for b in _branches(s)
                ]
        elif resource["Type"] in ("AWS::IAM::ManagedPolicy", "AWS::IAM::Policy"):
            found += [(name, b) for s in _as_list(props["PolicyDocument"]["Statement"]) for b in _branches(s)]
    return found


def violations(cfn: dict) -> list[str]:
    """Every breach of the least-privilege rules, as readable lines (empty when clean)."""
    problems = []
    for where, statement in identity_statements(cfn):
        if statement.get("Effect") != "Allow":
            continue
        actions = _as_list(statement["Action"])
        problems += [f"{where}: wildcard action {a}" for a in actions if "*" in a]
        if "*" not in _as_list(statement["Resource"]):
            continue
        for action in actions:
            if action not in STAR_RESOURCE_ACTIONS:
                problems.append(f"{where}: {action} on Resource '*' is not in the allow-list")
                continue
            key = STAR_RESOURCE_ACTIONS[action][1]
            conditions = statement.get("Condition", {})
            if key and not any(key in keys for keys in conditions.values()):
                problems.append(f"{where}: {action} on Resource '*' needs a {key} condition")
    managed_policy_ids = {n for n, r in cfn["Resources"].items() if r["Type"] == "AWS::IAM::ManagedPolicy"}
    for name, resource in cfn["Resources"].items():
        if resource["Type"] != "AWS::IAM::Role":
            continue
        for arn in resource["Properties"].get("ManagedPolicyArns", []):
            if isinstance(arn, dict):
                if arn.get("Ref") not in managed_policy_ids:
                    problems.append(f"{name}: managed policy {arn} is not one of this template's")
            elif arn not in MANAGED_POLICIES:
                problems.append(f"{name}: AWS managed policy {arn} is not in the allow-list")
    return problems


def test_deployed_roles_follow_least_privilege(cfn):
    assert violations(cfn) == []


def test_every_allow_listed_star_action_is_used_and_aws_agrees(cfn):
    used = {
        a
        for _, s in identity_statements(cfn)
        if s.get("Effect") == "Allow" and "*" in _as_list(s["Resource"])
        for a in _as_list(s["Action"])
    }
    assert set(STAR_RESOURCE_ACTIONS) == used, "drop allow-list entries nobody needs; add reasons for new ones"
    for action, (_, condition_key) in STAR_RESOURCE_ACTIONS.items():
        service, name = action.split(":")
        known = {k.lower(): v for k, v in IAM_DATA[service]["Actions"].items()}
        assert name.lower() in known, f"{action} is not an IAM action"
        if condition_key is None:
            # Without a narrowing condition the only excuse is that AWS offers no resource type.
            assert not known[name.lower()].get("Resources"), f"{action} supports resource ARNs: scope it"


@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        ({"Effect": "Allow", "Action": "*", "Resource": "*"}, "wildcard action *"),
        ({"Effect": "Allow", "Action": "ecs:Describe*", "Resource": "arn:x"}, "wildcard action ecs:Describe*"),
        ({"Effect": "Allow", "Action": "ecs:UpdateService", "Resource": "*"}, "not in the allow-list"),
        ({"Effect": "Allow", "Action": "ecs:ListTasks", "Resource": ["*"]}, "needs a ecs:cluster condition"),
    ],
)
def test_the_rules_catch_a_broad_statement(statement, expected):
    role = {
        "Type": "AWS::IAM::Role",
        "Properties": {"Policies": [{"PolicyName": "p", "PolicyDocument": {"Statement": [statement]}}]},
    }
    assert any(expected in line for line in violations({"Resources": {"R": role}}))


def test_the_rules_catch_a_foreign_managed_policy():
    role = {"Type": "AWS::IAM::Role", "Properties": {"ManagedPolicyArns": ["arn:aws:iam::aws:policy/AdministratorAccess"]}}
    assert violations({"Resources": {"R": role}}) == [
        "R: AWS managed policy arn:aws:iam::aws:policy/AdministratorAccess is not in the allow-list"
    ]


def _profile_steps_statements(cfn: dict) -> dict[str, dict]:
    role = cfn["Resources"]["ProfileStepsFunctionRole"]["Properties"]
    return {s["Sid"]: s for p in role["Policies"] for s in _as_list(p["PolicyDocument"]["Statement"]) if "Sid" in s}


def test_writes_on_the_data_plane_are_scoped_to_the_terraform_outputs(cfn):
    statements = _profile_steps_statements(cfn)
    assert statements["ScaleProfileServices"]["Resource"] == {"Ref": "ServiceArns"}
    pools = statements["ScalePools"]
    assert pools["Resource"] == statements["EmptyPools"]["Resource"] == {"Ref": "AsgArns"}
    assert pools["Condition"] == {"Null": {"aws:ResourceTag/servingctl:pool": "false"}}
    assert statements["ReadClusterTasks"]["Condition"] == {"ArnEquals": {"ecs:cluster": {"Ref": "ClusterArn"}}}
    assert statements["ReadRegistry"]["Resource"] == {"Ref": "RegistryPathArn"}


def test_state_machines_invoke_only_the_functions_they_substitute(cfn):
    for name, machine in cfn["Resources"].items():
        if machine["Type"] != "AWS::StepFunctions::StateMachine":
            continue
        substituted = {v["Fn::GetAtt"][0] for v in machine["Properties"]["DefinitionSubstitutions"].values() if "Fn::GetAtt" in v}
        role = cfn["Resources"][machine["Properties"]["RoleArn"]["Fn::GetAtt"][0]]["Properties"]
        invoked = {
            s["Resource"]["Fn::Sub"][1]["functionName"]["Ref"]
            for p in role.get("Policies", [])
            for s in _as_list(p["PolicyDocument"]["Statement"])
            if "lambda:InvokeFunction" in _as_list(s["Action"])
        }
        assert invoked == {f for f in substituted if cfn["Resources"][f]["Type"] == "AWS::Lambda::Function"}, name


# ---- the profile_steps role grants exactly the AWS calls its code makes -------------------------
def _modules_reachable_from(handler: Path) -> set[Path]:
    """servingctl modules the handler imports, directly or through other servingctl modules."""
    package_root = ROOT / "layers/core"
    seen: set[Path] = set()
    todo = [handler]
    while todo:
        tree = ast.parse(todo.pop().read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("servingctl"):
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names if alias.name.startswith("servingctl")]
            for name in names:
                base = package_root / name.replace(".", "/")
                for path in (base.with_suffix(".py"), base / "__init__.py"):
                    if path.is_file() and path not in seen:
                        seen.add(path)
                        todo.append(path)
    return seen


def boto3_actions(paths: set[Path]) -> set[str]:
    """IAM actions of `<service>.<operation>(...)` and `<service>.get_paginator("<op>")` calls,
    where the receiver is named after the boto3 service (the handlers' convention)."""
    session = botocore.session.get_session()
    services = set(session.get_available_services())
    actions = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            receiver = node.func.value
            service = receiver.id if isinstance(receiver, ast.Name) else getattr(receiver, "attr", None)
            if service not in services:
                continue
            method = node.func.attr
            if method == "get_paginator" and node.args and isinstance(node.args[0], ast.Constant):
                method = node.args[0].value
            model = session.get_service_model(service)
            operations = {xform_name(op): op for op in model.operation_names}
            if method in operations:
                actions.add(f"{model.signing_name}:{operations[method]}")
    return actions


def test_profile_steps_role_grants_exactly_the_calls_its_code_makes(cfn):
    called = boto3_actions(_modules_reachable_from(ROOT / "functions/profile_steps/app.py"))
    assert called, "no boto3 calls found: the receiver naming convention changed?"
    called |= {d for action in called for d in iam.DEPENDENT_ACTIONS.get(action, ())}
    role = cfn["Resources"]["ProfileStepsFunctionRole"]["Properties"]
    granted = {
        action
        for policy in role["Policies"]
        for s in _as_list(policy["PolicyDocument"]["Statement"])
        if s["Effect"] == "Allow"
        for action in _as_list(s["Action"])
    }
    assert called - granted == set(), "calls the role does not allow"
    services = {action.split(":")[0] for action in called}
    unused = {a for a in granted if a.split(":")[0] in services} - called
    assert unused == set(), "grants no code path uses"


def test_smoke_test_calls_no_aws_api_and_gets_no_policy(cfn):
    assert boto3_actions(_modules_reachable_from(ROOT / "functions/smoke_test/app.py")) == set()
    assert "Policies" not in cfn["Resources"]["SmokeTestFunctionRole"]["Properties"]


# ---- every action a policy names exists ---------------------------------------------------------
def _all_actions(cfn: dict) -> set[str]:
    return {a for _, s in identity_statements(cfn) for a in _as_list(s.get("Action", []))}


def test_every_action_named_in_a_policy_exists(cfn):
    actions = _all_actions(cfn)
    assert len(actions) > 40, "the policies were not found"
    assert sorted(a for a in actions if not iam.action_exists(a)) == [], "no botocore operation and not a permission-only action"
    for action in actions:
        service, name = action.split(":")
        assert name.lower() in IAM_DATA[service]["Actions"], f"{action}: AWS's IAM action list (cfn-lint's copy) disagrees"


@pytest.mark.parametrize("action", ["ecs:UpdateServices", "s3:ListObjectsV2", "states:Invoke"])
def test_a_misspelt_action_does_not_exist(action):
    assert not iam.action_exists(action)


def test_permission_only_actions_have_no_operation_and_aws_knows_them():
    for action in iam.PERMISSION_ONLY:
        prefix, name = action.split(":")
        assert name.lower() in IAM_DATA[prefix]["Actions"], action
        assert not any(name in ops for ops in iam.operations_by_prefix()[prefix]), (
            f"{action} is an operation: drop it from PERMISSION_ONLY"
        )


# ---- policies evaluated as AWS would, with placeholder names -------------------------------------
TABLE_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/state"


class _Placeholders(dict):
    """Refs for rendering a policy: the names given, "<Name>" for any other."""

    def __missing__(self, key):
        return f"<{key}>"


def _role_policy(cfn: dict, role: str, **given) -> iam.Policy:
    refs = _Placeholders(
        {
            "AWS::Partition": "aws",
            "AWS::Region": "us-east-1",
            "AWS::AccountId": "123456789012",
            "RecordsBucket.Arn": "arn:aws:s3:::records",
            "StateTable.Arn": TABLE_ARN,
            "AsgArns": ["arn:asg"],
            "BenchImageUri": "",
            "ClusterArn": "arn:aws:ecs:us-east-1:123456789012:cluster/c",
            **given,
        }
    )
    return iam.role_policy(cfn, role, refs, iam.evaluate_conditions(cfn, refs))


# S3: "no such record" can be told from "denied", under the run's own prefix only.
@pytest.mark.parametrize(
    ("prefix", "allowed"),
    [
        ("runs/r1/shards/in64-c2/0.jsonl.gz", True),
        ("runs/r1/", True),
        ("runs/r2/x", False),
        ("runs/", False),
        ("run", False),
        ("other/x", False),
    ],
)
def test_a_run_session_may_list_the_records_of_its_run_only(cfn, prefix, allowed):
    policy = _role_policy(cfn, "BenchRunRole")
    listing = iam.Request("s3:ListBucket", "arn:aws:s3:::records", {"s3:prefix": (prefix,), **RUN_R1})
    assert bool(policy.allowing(listing)) is allowed
    assert not policy.allowing(iam.Request("s3:ListBucket", "arn:aws:s3:::records", RUN_R1)), "a listing of the whole bucket"


# The item key spaces (partition keys) each role may write, as the report's table gives them:
# role -> {action: partitions allowed}; every other partition of the layout is refused.
PARTITIONS = ["profile#p", "profile#q", "lock", "session#p", "start#p", "run#r1", "run#r2", "idempotency#api"]
RUN_R1 = {"aws:PrincipalTag/run": ("r1",), "aws:PrincipalTag/profile": ("p",)}
WRITES = {
    "ProfileStepsFunctionRole": {
        "dynamodb:PutItem": {"profile#p", "profile#q", "lock", "session#p", "start#p"},
        "dynamodb:UpdateItem": {"profile#p", "profile#q", "lock", "session#p", "start#p"},
        "dynamodb:DeleteItem": {"lock"},
    },
    "ApiFunctionRole": {
        "dynamodb:PutItem": {"idempotency#api", "run#r1", "run#r2"},  # a run: only its cancel
        "dynamodb:UpdateItem": {"profile#p", "profile#q", "idempotency#api"},
        "dynamodb:DeleteItem": {"idempotency#api"},
    },
    "SweepFunctionRole": {
        "dynamodb:PutItem": {"run#r1", "run#r2"},
        "dynamodb:UpdateItem": {"profile#p", "profile#q"},
        "dynamodb:DeleteItem": {"lock"},
    },
    "BenchWorkerFunctionRole": {"dynamodb:PutItem": set(), "dynamodb:UpdateItem": set(), "dynamodb:DeleteItem": set()},
    "BenchTaskRole": {"dynamodb:PutItem": set(), "dynamodb:UpdateItem": set(), "dynamodb:DeleteItem": set()},
    # A session tagged run=r1, profile=p: its run's partition and its profile's hold, nothing else.
    "BenchRunRole": {
        "dynamodb:PutItem": {"run#r1"},
        "dynamodb:UpdateItem": {"profile#p", "run#r1"},
        "dynamodb:DeleteItem": set(),
        "dynamodb:ConditionCheckItem": {"run#r1"},
    },
}


@pytest.mark.parametrize(("role", "action"), [(r, a) for r, actions in WRITES.items() for a in actions])
def test_each_role_writes_only_its_key_spaces(cfn, role, action):
    policy = _role_policy(cfn, role)
    context = RUN_R1 if role == "BenchRunRole" else {}
    allowed = {
        p for p in PARTITIONS if policy.allowing(iam.Request(action, TABLE_ARN, {"dynamodb:LeadingKeys": (p,), **context}))
    }
    assert allowed == WRITES[role][action]


def test_a_run_session_without_its_profile_tag_touches_no_profile(cfn):
    # A step that knows only the run id reads the run first with a run-only session.
    policy = _role_policy(cfn, "BenchRunRole")
    run_only = {"aws:PrincipalTag/run": ("r1",)}
    assert policy.allowing(iam.Request("dynamodb:GetItem", TABLE_ARN, {"dynamodb:LeadingKeys": ("run#r1",), **run_only}))
    for action in ("dynamodb:GetItem", "dynamodb:UpdateItem"):
        for profile in ("profile#p", "profile#"):
            assert not policy.allowing(iam.Request(action, TABLE_ARN, {"dynamodb:LeadingKeys": (profile,), **run_only}))
    # A tag value is a literal, not a pattern: a run tagged "*" matches no run.
    starred = {"aws:PrincipalTag/run": ("*",), "aws:PrincipalTag/profile": ("*",)}
    assert not policy.allowing(iam.Request("dynamodb:PutItem", TABLE_ARN, {"dynamodb:LeadingKeys": ("run#r1",), **starred}))
    assert not policy.allowing(iam.Request("s3:PutObject", "arn:aws:s3:::records/runs/r1/x", starred))


@pytest.mark.parametrize(
    ("key", "allowed"),
    [
        ("runs/r1/in64-c1.0.jsonl.gz", True),
        ("runs/r1/shards/in64-c2/0.1.jsonl.gz", True),
        ("runs/r2/in64-c1.0.jsonl.gz", False),
        ("runs/r1", False),
        ("other/r1/x", False),
    ],
)
def test_a_run_session_writes_and_reads_its_run_records_only(cfn, key, allowed):
    policy = _role_policy(cfn, "BenchRunRole")
    for action in ("s3:PutObject", "s3:GetObject"):
        assert bool(policy.allowing(iam.Request(action, f"arn:aws:s3:::records/{key}", RUN_R1))) is allowed
    assert not policy.allowing(iam.Request("s3:DeleteObject", f"arn:aws:s3:::records/{key}", RUN_R1))


@pytest.mark.parametrize(
    ("action", "partition", "allowed"),
    [
        ("dynamodb:GetItem", "profile#p", True),
        ("dynamodb:Query", "session#nemotron-nano", True),
        ("dynamodb:Query", "run#2026-12-03T12-00-00Z-x", True),
        ("dynamodb:GetItem", "profile", False),
        ("dynamodb:GetItem", "idempotency#api", True),
        ("dynamodb:GetItem", "lock", False),
        ("dynamodb:UpdateItem", "profile#p", True),
        ("dynamodb:PutItem", "idempotency#api", True),
        ("dynamodb:DeleteItem", "idempotency#api", True),
        ("dynamodb:PutItem", "session#nemotron-nano", False),
        ("dynamodb:UpdateItem", "lock", False),
        ("dynamodb:PutItem", "run#r1", True),  # POST /benchmarks/{run_id}/cancel marks it CANCELLED
        ("dynamodb:PutItem", "start#nemotron-nano", False),
    ],
)
def test_the_api_reads_and_writes_only_its_items(cfn, action, partition, allowed):
    policy = _role_policy(cfn, "ApiFunctionRole")
    assert bool(policy.allowing(iam.Request(action, TABLE_ARN, {"dynamodb:LeadingKeys": (partition,)}))) is allowed
    assert not policy.allowing(iam.Request("dynamodb:Scan", TABLE_ARN)), "a Scan names no partition: not granted"


@pytest.mark.parametrize("role", ["ApiFunctionRole", "SweepFunctionRole", "ProfileStepsFunctionRole"])
def test_listings_come_from_the_index_which_no_one_writes(cfn, role):
    policy = _role_policy(cfn, role)
    index = f"{TABLE_ARN}/index/listing"
    assert policy.allowing(iam.Request("dynamodb:Query", index, {"dynamodb:LeadingKeys": ("profile",)}))
    assert not policy.allowing(iam.Request("dynamodb:Scan", index))


@pytest.mark.parametrize(
    ("sizes", "allowed"),
    [
        ({"autoscaling:MinSize": ("0",)}, True),
        ({"autoscaling:MinSize": ("1",)}, False),
        ({"autoscaling:MinSize": ("0",), "autoscaling:MaxSize": ("1",)}, False),
        ({}, False),
    ],
)
def test_pool_updates_may_only_lower_the_minimum_to_zero(cfn, sizes, allowed):
    policy = _role_policy(cfn, "ProfileStepsFunctionRole")
    tagged = {"aws:ResourceTag/servingctl:pool": ("g7e-1gpu",), **sizes}
    assert bool(policy.allowing(iam.Request("autoscaling:UpdateAutoScalingGroup", "arn:asg", tagged))) is allowed


@pytest.mark.parametrize(
    "image",
    [
        "111122223333.dkr.ecr.eu-west-1.amazonaws.com/team/servingctl-bench:v1",
        "111122223333.dkr.ecr.eu-west-1.amazonaws.com/team/servingctl-bench@sha256:" + "a" * 64,
    ],
)
def test_the_bench_task_pulls_only_the_repository_its_image_names(cfn, image):
    policy = _role_policy(cfn, "BenchTaskExecutionRole", BenchImageUri=image)
    repository = "arn:aws:ecr:eu-west-1:111122223333:repository/team/servingctl-bench"
    for action in ("ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"):
        assert policy.allowing(iam.Request(action, repository)), action
        assert not policy.allowing(iam.Request(action, repository + "-other")), action
        assert not policy.allowing(iam.Request(action, "arn:aws:ecr:eu-west-1:111122223333:repository/team/other")), action


def test_without_a_bench_image_the_task_may_pull_nothing(cfn):
    policy = _role_policy(cfn, "BenchTaskExecutionRole")
    assert [statement["Sid"] for _, statement in policy.statements] == ["EcrLogin", "WriteTaskLogs"]


@pytest.mark.parametrize(
    ("tags", "allowed"),
    [
        ({"run": "r1", "profile": "p"}, True),
        ({"run": "r1"}, True),
        ({"profile": "p"}, False),
        ({}, False),
        ({"run": "r1", "profile": "p", "admin": "yes"}, False),
    ],
)
def test_the_run_role_is_assumed_only_with_a_run_tag(cfn, tags, allowed):
    refs = _Placeholders(
        {
            "AWS::Partition": "aws",
            "AWS::AccountId": "123456789012",
            "AWS::Region": "us-east-1",
            "StateTable.Arn": TABLE_ARN,
            "RecordsBucket.Arn": "arn:aws:s3:::records",
            "BenchRunRole.Arn": "arn:aws:iam::123456789012:role/run",
            "ClusterArn": "arn:aws:ecs:us-east-1:123456789012:cluster/c",
        }
    )
    [(arn, policy)] = iam.assumable_policies(cfn, refs).items()
    caller = _role_policy(cfn, "BenchWorkerFunctionRole", **{"BenchRunRole.Arn": arn})
    names = iam.Names("123456789012", "us-east-1", {}, asg_arn=str, asg_tags=lambda group: {})
    enforcer = iam.Enforcer({"bench_worker": caller, arn: policy}, names, lambda bucket, key: True)
    params = {"RoleArn": arn, "RoleSessionName": "bench-r1", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
    requests = iam.requests_of("sts", "AssumeRole", params, names)
    assert all(caller.allowing(r) for r in requests)  # the worker's own policy allows it whatever the tags
    assert all(enforcer.trusted(r) for r in requests) is allowed  # the role's trust policy decides
    assert (enforcer.decide("bench_worker", "sts", "AssumeRole", params).denied is None) is allowed
