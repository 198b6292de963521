"""An IAM linter (cloudsplaining, in its own venv) over every policy the project deploys: the
template's roles after the SAM transform and Terraform's aws_iam_policy_document blocks. No finding
of privilege escalation, resource exposure, data exfiltration, credentials exposure, a service
wildcard or write access on Resource "*" (infrastructure modification), except where the file says
why, on a comment of its own in the statement's file:
    # iam-lint: <Risk> <action>: <why>
Every finding needs such a line and every such line a finding (a stale exception fails too).
`pytest -q -s tests/infra/template/test_iam_lint.py` prints the findings per policy.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import hcl2
import pytest

from servingctl_twin import iam

ROOT = Path(__file__).resolve().parents[3]
RUNNER = Path(__file__).with_name("iam_lint.py")
TERRAFORM = ROOT / "infra/terraform"
EXCEPTION = re.compile(r"#\s*iam-lint:\s*(\w+)\s+([\w:*-]+):\s*(\S.{9,})")


class _Placeholders(dict):
    """Refs for rendering the template's policies: realistic values where an intrinsic splits them."""

    def __missing__(self, key: str) -> str:
        return f"<{key}>"


REFS = _Placeholders(
    {
        "AWS::Partition": "aws",
        "AWS::Region": "us-east-1",
        "AWS::AccountId": "123456789012",
        "AWS::StackName": "servingctl",
        "ClusterArn": "arn:aws:ecs:us-east-1:123456789012:cluster/c",
        "AsgArns": ["arn:aws:autoscaling:us-east-1:123456789012:asg"],
        "BenchImageUri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/servingctl-bench:1",
        "ServiceArns": ["arn:svc"],
        "ModelLogGroupArns": ["arn:lg"],
        "LaunchTemplateArns": ["arn:lt"],
        "PrivateSubnetIds": [],
    }
)


def template_policies(cfn: dict) -> dict[str, dict[str, Any]]:
    """Each IAM role's inline policies in the translated template (with the benchmark image: every
    conditional statement present), as one policy document per role."""
    conditions = iam.evaluate_conditions(cfn, REFS)
    found = {}
    for logical, resource in cfn["Resources"].items():
        if resource["Type"] == "AWS::IAM::Role":
            statements = [s for _, s in iam.role_policy(cfn, logical, REFS, conditions).statements]
            if statements:
                found[f"template.yaml:{logical}"] = {"Version": "2012-10-17", "Statement": statements}
    return found


def _unquote(value: Any) -> Any:
    return value[1:-1] if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"' else value


def terraform_policies() -> dict[str, dict[str, Any]]:
    """Every aws_iam_policy_document of infra/terraform as a policy document (trust statements, the
    ones with principals, left out: they grant nothing to call); interpolations stay as text."""
    found = {}
    for path in sorted(TERRAFORM.rglob("*.tf")):
        with path.open() as source:
            blocks = hcl2.load(source).get("data", [])
        for block in blocks:
            for kind, named in block.items():
                if _unquote(kind) != "aws_iam_policy_document":
                    continue
                for name, body in named.items():
                    statements = []
                    for st in body.get("statement", []):
                        if st.get("principals"):
                            continue
                        statement: dict[str, Any] = {
                            "Effect": _unquote(st.get("effect", '"Allow"')),
                            "Action": [_unquote(a) for a in st.get("actions", [])],
                            "Resource": [_unquote(r) for r in st.get("resources", [])],
                        }
                        for c in st.get("condition", []):
                            statement.setdefault("Condition", {}).setdefault(_unquote(c["test"]), {})[_unquote(c["variable"])] = [
                                _unquote(v) for v in c["values"]
                            ]
                        statements.append(statement)
                    if statements:
                        found[f"{path.relative_to(ROOT)}:{_unquote(name)}"] = {"Version": "2012-10-17", "Statement": statements}
    return found


def lint(python: Path, policies: dict[str, dict[str, Any]]) -> dict[str, dict[str, list[str]]]:
    """cloudsplaining's findings per policy: {name: {risk: [actions]}}."""
    result = subprocess.run(
        [str(python), str(RUNNER)], input=json.dumps(policies), capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def exceptions(files: list[Path]) -> set[tuple[str, str, str]]:
    """(file, risk, action) of every `# iam-lint: <Risk> <action>: <why>` line (why at least 10 characters)."""
    return {(str(f.relative_to(ROOT)), m.group(1), m.group(2)) for f in files for m in EXCEPTION.finditer(f.read_text())}


def _findings(found: dict[str, dict[str, list[str]]]) -> set[tuple[str, str, str]]:
    return {
        (name.split(":")[0], risk, action)
        for name, risks in found.items()
        for risk, actions in risks.items()
        for action in actions
    }


@pytest.fixture(scope="module")
def findings(cfn: dict, cloudsplaining: Path) -> dict[str, dict[str, list[str]]]:
    found = lint(cloudsplaining, template_policies(cfn) | terraform_policies())
    print("\nIAM lint (cloudsplaining):", json.dumps({k: v for k, v in found.items() if v}, indent=1, sort_keys=True))
    return found


def test_every_policy_is_scanned(findings: dict) -> None:
    for name in (
        "template.yaml:ProfileStepsFunctionRole",
        "template.yaml:BenchRunRole",
        "template.yaml:BenchWorkerFunctionRole",
        "template.yaml:ApiFunctionRole",
        "template.yaml:SweepFunctionRole",
        "template.yaml:BenchTaskRole",
        "infra/terraform/modules/cluster/main.tf:instance",
        "infra/terraform/modules/serving-profile/main.tf:execution",
    ):
        assert name in findings


def test_no_finding_without_an_inline_reason(findings: dict) -> None:
    files = [ROOT / "template.yaml", *sorted(TERRAFORM.rglob("*.tf"))]
    assert _findings(findings) == exceptions(files), "a finding to fix, or an `# iam-lint:` line with no finding left"


def test_the_linter_finds_what_it_should(cloudsplaining: Path) -> None:
    # Grants that must fail the check: writes, a role pass and a launch on "*", a parameter read on "*".
    found = lint(
        cloudsplaining,
        {
            "bad": {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Action": ["dynamodb:PutItem", "iam:PassRole", "ec2:RunInstances", "ssm:GetParameter"],
                        "Resource": "*",
                    }
                ],
            }
        },
    )
    assert {"dynamodb:PutItem", "ec2:RunInstances"} <= set(found["bad"]["InfrastructureModification"])
    assert found["bad"]["PrivilegeEscalation"]  # pass an existing role to a new instance
    assert "iam:PassRole" in found["bad"]["ResourceExposure"]
    assert "ssm:GetParameter" in found["bad"]["DataExfiltration"]
    # The same scoped to resources: nothing.
    assert lint(
        cloudsplaining,
        {
            "good": {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Action": ["dynamodb:PutItem"],
                        "Resource": "arn:aws:dynamodb:us-east-1:123456789012:table/t",
                    }
                ],
            }
        },
    ) == {"good": {}}
