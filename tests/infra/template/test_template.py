"""template.yaml: cfn-lint clean; every function's code exists and gets the shared runtime,
tracing, logging and environment; data is kept safe (table PITR/SSE/TTL, private TLS-only bucket);
state machines are traced, logged and alarmed; the API, when present, needs IAM auth; the layer
ships the same pins as pyproject."""

import ast
import tomllib
from pathlib import Path

import pytest
from cfnlint.api import lint_file

ROOT = Path(__file__).resolve().parents[3]
# Functions the contract puts in the VPC (they reach the internal ALB); every other one stays out.
VPC_FUNCTIONS = {"smoke_test", "bench_worker", "sweep"}  # the sweep reads the model servers' gauges


def _of_type(template: dict, resource_type: str) -> dict[str, dict]:
    return {n: r for n, r in template["Resources"].items() if r["Type"] == resource_type}


def test_cfn_lint_reports_nothing():
    assert [str(match) for match in lint_file(ROOT / "template.yaml")] == []


def _defines_lambda_handler(source: Path) -> bool:
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.FunctionDef) and node.name == "lambda_handler":
            return True
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "lambda_handler" for t in node.targets):
            return True
    return False


def test_every_function_points_at_a_handler_on_disk(template):
    handler_default = template["Globals"]["Function"]["Handler"]
    for name, function in _of_type(template, "AWS::Serverless::Function").items():
        props = function["Properties"]
        module, _, attribute = props.get("Handler", handler_default).rpartition(".")
        source = ROOT / props["CodeUri"] / f"{module}.py"
        assert source.is_file(), f"{name}: {source} is missing"
        assert attribute == "lambda_handler" and _defines_lambda_handler(source), f"{name}: no lambda_handler in {source}"


def test_every_function_gets_runtime_layer_tracing_json_logs_and_environment(cfn):
    functions = _of_type(cfn, "AWS::Lambda::Function")
    assert functions
    for name, function in functions.items():
        props = function["Properties"]
        assert props["Runtime"] == "python3.12", name
        assert props["TracingConfig"] == {"Mode": "Active"}, name
        assert props["LoggingConfig"]["LogFormat"] == "JSON", name
        assert props["LoggingConfig"]["LogGroup"] == {"Ref": "FunctionLogGroup"}, name
        assert any("CoreLayer" in str(layer) for layer in props["Layers"]), name
        env = props["Environment"]["Variables"]
        assert env["SERVINGCTL_REGISTRY"] == {"Fn::Sub": "ssm:${RegistryPath}"}, name
        assert env["SERVINGCTL_TABLE"] == {"Ref": "StateTable"}, name
        assert env["POWERTOOLS_SERVICE_NAME"] == env["POWERTOOLS_METRICS_NAMESPACE"] == "servingctl", name


def test_only_the_contract_vpc_functions_are_in_the_vpc_on_terraform_network(template):
    for name, function in _of_type(template, "AWS::Serverless::Function").items():
        props = function["Properties"]
        in_vpc = Path(props["CodeUri"]).name in VPC_FUNCTIONS
        assert ("VpcConfig" in props) == in_vpc, name
        if in_vpc:
            assert props["VpcConfig"] == {
                "SubnetIds": {"Ref": "PrivateSubnetIds"},
                "SecurityGroupIds": [{"Ref": "LambdaSecurityGroupId"}],
            }, name


def test_table_keeps_state_recoverable_encrypted_and_expiring(template):
    (table,) = _of_type(template, "AWS::DynamoDB::Table").values()
    props = table["Properties"]
    assert table["DeletionPolicy"] == table["UpdateReplacePolicy"] == "Retain"
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert {k["AttributeName"]: k["KeyType"] for k in props["KeySchema"]} == {"pk": "HASH", "sk": "RANGE"}
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert props["SSESpecification"]["SSEEnabled"] is True
    assert props["TimeToLiveSpecification"] == {"AttributeName": "ttl", "Enabled": True}
    assert props["DeletionProtectionEnabled"] is True


def test_table_keys_and_listing_index_are_what_the_store_creates(template):
    # The twin and the tests create the table with servingctl.store.dynamodb.TABLE_SCHEMA.
    from servingctl.store.dynamodb import TABLE_SCHEMA

    (table,) = _of_type(template, "AWS::DynamoDB::Table").values()
    props = table["Properties"]
    assert props["KeySchema"] == TABLE_SCHEMA["KeySchema"]
    assert sorted(props["AttributeDefinitions"], key=str) == sorted(TABLE_SCHEMA["AttributeDefinitions"], key=str)
    assert props["GlobalSecondaryIndexes"] == TABLE_SCHEMA["GlobalSecondaryIndexes"]


def test_records_bucket_is_private_encrypted_versioned_and_tls_only(template):
    buckets = _of_type(template, "AWS::S3::Bucket")
    policies = {p["Properties"]["Bucket"]["Ref"]: p for p in _of_type(template, "AWS::S3::BucketPolicy").values()}
    assert buckets
    for name, bucket in buckets.items():
        props = bucket["Properties"]
        assert (
            set(props["PublicAccessBlockConfiguration"].values()) == {True} and len(props["PublicAccessBlockConfiguration"]) == 4
        ), name
        assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"], name
        assert props["VersioningConfiguration"] == {"Status": "Enabled"}, name
        statements = policies[name]["Properties"]["PolicyDocument"]["Statement"]
        assert any(s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in statements), (
            name
        )


def test_every_state_machine_is_traced_logged_and_alarmed(template):
    alarmed = {
        dimension["Value"]["Ref"]
        for alarm in _of_type(template, "AWS::CloudWatch::Alarm").values()
        if alarm["Properties"]["MetricName"] == "ExecutionsFailed"
        for dimension in alarm["Properties"]["Dimensions"]
        if dimension["Name"] == "StateMachineArn"
    }
    machines = _of_type(template, "AWS::Serverless::StateMachine")
    assert machines
    for name, machine in machines.items():
        props = machine["Properties"]
        assert props["Type"] == "STANDARD", name
        assert props["Tracing"] == {"Enabled": True}, name
        assert props["Logging"]["Level"] in ("ERROR", "ALL"), name
        assert props["Logging"]["Destinations"], name
        assert name in alarmed, f"{name}: no ExecutionsFailed alarm"


def api_auth_problems(template: dict) -> list[str]:
    """API Gateway resources or events reachable without IAM (SigV4) auth."""
    problems = []
    iam_apis = set()
    for name, api in _of_type(template, "AWS::Serverless::Api").items():
        if api["Properties"].get("Auth", {}).get("DefaultAuthorizer") == "AWS_IAM":
            iam_apis.add(name)
        else:
            problems.append(f"{name}: DefaultAuthorizer is not AWS_IAM")
    for name, api in _of_type(template, "AWS::Serverless::HttpApi").items():
        auth = api["Properties"].get("Auth", {})
        if auth.get("DefaultAuthorizer") != "AWS_IAM" or not auth.get("EnableIamAuthorizer"):
            problems.append(f"{name}: HTTP API without the IAM authorizer as default")
    for name, method in _of_type(template, "AWS::ApiGateway::Method").items():
        if method["Properties"].get("AuthorizationType") != "AWS_IAM":
            problems.append(f"{name}: AuthorizationType is not AWS_IAM")
    for name, function in _of_type(template, "AWS::Serverless::Function").items():
        for event_name, event in function["Properties"].get("Events", {}).items():
            if event["Type"] not in ("Api", "HttpApi"):
                continue
            props = event.get("Properties", {})
            where = f"{name}.{event_name}"
            if props.get("Auth", {}).get("Authorizer", "AWS_IAM") != "AWS_IAM":
                problems.append(f"{where}: overrides the authorizer")
            api_ref = (props.get("RestApiId") or props.get("ApiId") or {}).get("Ref")
            if event["Type"] == "Api" and api_ref not in iam_apis:
                problems.append(f"{where}: not attached to an IAM-authorized AWS::Serverless::Api")
    return problems


def test_api_requires_iam_auth(template):
    assert api_auth_problems(template) == []


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        ({"Api": {"Type": "AWS::Serverless::Api", "Properties": {"StageName": "v1"}}}, "Api: DefaultAuthorizer"),
        (
            {"Fn": {"Type": "AWS::Serverless::Function", "Properties": {"Events": {"Get": {"Type": "Api"}}}}},
            "Fn.Get: not attached",
        ),
        (
            {
                "Api": {"Type": "AWS::Serverless::Api", "Properties": {"Auth": {"DefaultAuthorizer": "AWS_IAM"}}},
                "Fn": {
                    "Type": "AWS::Serverless::Function",
                    "Properties": {
                        "Events": {
                            "Get": {
                                "Type": "Api",
                                "Properties": {"RestApiId": {"Ref": "Api"}, "Auth": {"Authorizer": "NONE"}},
                            }
                        }
                    },
                },
            },
            "Fn.Get: overrides the authorizer",
        ),
        ({"M": {"Type": "AWS::ApiGateway::Method", "Properties": {"AuthorizationType": "NONE"}}}, "M: Authorization"),
    ],
)
def test_the_api_check_catches_open_routes(resources, expected):
    assert any(line.startswith(expected) for line in api_auth_problems({"Resources": resources}))


def _pins(lines: list[str]) -> dict[str, str]:
    pins = {}
    for line in lines:
        line = line.split("#")[0].strip()
        if line and not line.startswith("-"):
            name, _version = line.split("==")
            pins[name.split("[")[0].lower().replace("_", "-")] = line
    return pins


def test_layer_ships_the_runtime_pins_of_pyproject():
    runtime = _pins(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])
    requirements = (ROOT / "layers/core/requirements.txt").read_text().splitlines()
    # The product's dependencies are the layer's: its client-side extras and the CLI's and twin's
    # are not in pyproject's `dependencies`.
    assert _pins(requirements) == runtime
    # Transitive versions: the same constraints file as the venvs, found relative to the file.
    assert "-c ../../constraints.txt" in requirements
    assert (ROOT / "layers/core" / "../../constraints.txt").resolve() == ROOT / "constraints.txt"


def _referenced_names(node) -> set[str]:
    """Names a template node refers to: Ref targets and ${Name} / ${Name.Attr} inside Sub strings."""
    import re

    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "Ref" and isinstance(value, str):
                found.add(value)
            elif key == "Fn::Sub":
                text = value if isinstance(value, str) else value[0]
                found |= {m.split(".")[0] for m in re.findall(r"\$\{([A-Za-z0-9:.]+)\}", text)}
            found |= _referenced_names(value)
    elif isinstance(node, list):
        for item in node:
            found |= _referenced_names(item)
    return found


def test_every_template_parameter_is_used(template):
    # A declared but unused parameter is one more Terraform output to pass for nothing.
    used = _referenced_names({k: v for k, v in template.items() if k != "Parameters"})
    assert sorted(set(template["Parameters"]) - used) == []


def test_a_failed_sweep_lands_in_an_alarmed_dead_letter_queue(template):
    resources = template["Resources"]
    queue = {"Fn::GetAtt": ["SweepDeadLetterQueue", "Arn"]}
    assert resources["SweepFunction"]["Properties"]["DeadLetterQueue"] == {"Type": "SQS", "TargetArn": queue}
    assert resources["SweepSchedule"]["Properties"]["Target"]["DeadLetterConfig"] == {"Arn": queue}
    alarms = [
        r["Properties"]
        for r in _of_type(template, "AWS::CloudWatch::Alarm").values()
        if r["Properties"]["Namespace"] == "AWS/SQS"
    ]
    assert [a["Dimensions"] for a in alarms] == [
        [{"Name": "QueueName", "Value": {"Fn::GetAtt": ["SweepDeadLetterQueue", "QueueName"]}}]
    ]
    assert alarms[0]["Threshold"] == 1 and alarms[0]["AlarmActions"] == [{"Ref": "AlarmTopic"}]


class _Refs(dict):
    """Parameter values given; any other name stands for itself."""

    def __missing__(self, name: str) -> str:
        return name


def _reserved(cfn: dict, setting: str | None) -> dict[str, int]:
    """Function logical ID -> reserved concurrency in the deployed template, with ReservedConcurrency
    set to setting (None: its default)."""
    from servingctl_twin.iam import evaluate_conditions, resolve

    default = cfn["Parameters"]["ReservedConcurrency"]["Default"]
    refs = _Refs({"ReservedConcurrency": setting or default})
    conditions = evaluate_conditions(cfn, refs)
    found = {}
    for name, function in _of_type(cfn, "AWS::Lambda::Function").items():
        # Resolved in a list: AWS::NoValue drops out, as CloudFormation drops the property.
        value = resolve([function["Properties"].get("ReservedConcurrentExecutions", {"Ref": "AWS::NoValue"})], refs, conditions)
        if value:
            found[name] = int(value[0])
    return found


def test_no_concurrency_is_reserved_by_default_so_a_new_account_can_deploy(cfn):
    # Lambda keeps 100 of the account's concurrency unreserved: a new account's quota (often 10)
    # leaves nothing to reserve. The parameter's allowed values are the two settings.
    parameter = cfn["Parameters"]["ReservedConcurrency"]
    assert (parameter["Default"], parameter["AllowedValues"]) == ("off", ["off", "on"])
    assert _reserved(cfn, None) == {} and _reserved(cfn, "off") == {}


def test_reserved_concurrency_on_gives_the_sweep_one_and_caps_the_bench_worker_above_a_split_scenario(cfn):
    from servingctl.runs.matrix import MAX_WORKERS

    reserved = _reserved(cfn, "on")
    assert set(reserved) == {"SweepFunction", "BenchWorkerFunction"} and reserved["SweepFunction"] == 1
    # A split scenario starts MAX_WORKERS shards at the same instant: a cap below it would throttle one.
    assert MAX_WORKERS <= reserved["BenchWorkerFunction"] <= 4 * MAX_WORKERS
    # What README and the parameter tell a user about the account quota it then needs.
    needed = 100 + sum(reserved.values())
    assert f"under {needed}" in " ".join(cfn["Parameters"]["ReservedConcurrency"]["Description"].split())


def test_flows_that_end_aborted_timed_out_or_failed_reach_the_reconciler(template):
    resources = template["Resources"]
    rule = resources["FlowEndedRule"]["Properties"]
    pattern = rule["EventPattern"]
    assert pattern["source"] == ["aws.states"] and pattern["detail-type"] == ["Step Functions Execution Status Change"]
    assert sorted(pattern["detail"]["status"]) == ["ABORTED", "FAILED", "TIMED_OUT"]
    machines = {m["Ref"] for m in pattern["detail"]["stateMachineArn"]}
    assert machines == {"StartProfileStateMachine", "StopProfileStateMachine", "RunBenchmarkStateMachine"}
    [target] = rule["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": ["SweepFunction", "Arn"]}
    assert target["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": ["SweepDeadLetterQueue", "Arn"]}}
    permission = resources["FlowEndedPermission"]["Properties"]
    assert permission["SourceArn"] == {"Fn::GetAtt": ["FlowEndedRule", "Arn"]}
    assert permission["Principal"] == "events.amazonaws.com"


def test_start_and_stop_alarm_when_aborted_failed_or_timed_out_and_the_sweep_on_errors(template):
    alarms = [a["Properties"] for a in _of_type(template, "AWS::CloudWatch::Alarm").values()]
    by_machine: dict[str, set[str]] = {}
    for alarm in alarms:
        for dimension in alarm["Dimensions"]:
            if dimension["Name"] == "StateMachineArn":
                by_machine.setdefault(dimension["Value"]["Ref"], set()).add(alarm["MetricName"])
    wanted = {"ExecutionsAborted", "ExecutionsFailed", "ExecutionsTimedOut"}
    assert wanted <= by_machine["StartProfileStateMachine"] and wanted <= by_machine["StopProfileStateMachine"]
    sweep = [(a["Namespace"], a["MetricName"]) for a in alarms if a["Namespace"] in ("servingctl", "AWS/Lambda")]
    assert sorted(sweep) == [("AWS/Lambda", "Errors"), ("servingctl", "SweepErrors")]
    assert all(a["AlarmActions"] == [{"Ref": "AlarmTopic"}] and a["Threshold"] == 1 for a in alarms)
