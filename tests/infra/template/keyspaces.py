"""Print, per role of a template, the item key spaces (partition keys) and record keys it may write:
`.venv/bin/python tests/infra/template/keyspaces.py [template.yaml]` (the figure of issue 28; a
template of the shared-partition layout, such as `git show eb8f96b:template.yaml`, is probed with
that layout's keys). Translated with the SAM venv, decided by the twin's IAM evaluator;
BenchRunRole as a session tagged run=r1, profile=p.
"""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "layers/core"))

from servingctl_twin import iam  # noqa: E402

ROLES = (
    "ProfileStepsFunctionRole",
    "ApiFunctionRole",
    "SweepFunctionRole",
    "BenchWorkerFunctionRole",
    "BenchTaskRole",
    "BenchRunRole",
)
OLD = ("profile", "lock", "session#p", "start#p", "run", "run#r1", "run#r2", "idempotency#api")
NEW = ("profile#p", "profile#q", "lock", "session#p", "start#p", "run#r1", "run#r2", "idempotency#api")
TAGS = {"aws:PrincipalTag/run": ("r1",), "aws:PrincipalTag/profile": ("p",)}


class _Placeholders(dict):
    def __missing__(self, key: str) -> str:
        return f"<{key}>"


def main(template: str) -> None:
    """Translate template, probe each role's writes, print one line per role."""
    out = subprocess.run(
        [str(ROOT / ".venv-sam/bin/python"), str(ROOT / "tests/infra/template/sam_translate.py"), template],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    cfn = json.loads(out)
    refs = _Placeholders(
        {
            "AWS::Partition": "aws",
            "AWS::Region": "us-east-1",
            "AWS::AccountId": "123456789012",
            "ClusterArn": "arn:aws:ecs:us-east-1:123456789012:cluster/c",
            "AsgArns": ["arn:asg"],
            "BenchImageUri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/bench:1",
        }
    )
    conditions = iam.evaluate_conditions(cfn, refs)
    partitions = NEW if "BenchRunRole" in cfn["Resources"] else OLD
    for role in ROLES:
        if role not in cfn["Resources"]:
            continue
        policy = iam.role_policy(cfn, role, refs, conditions)
        context = TAGS if role == "BenchRunRole" else {}
        row = {
            a: [
                p
                for p in partitions
                if policy.allowing(iam.Request(f"dynamodb:{a}", "<StateTable.Arn>", {"dynamodb:LeadingKeys": (p,), **context}))
            ]
            for a in ("PutItem", "UpdateItem", "DeleteItem")
        }
        row["s3:PutObject"] = [
            k
            for k in ("runs/r1/*", "runs/r2/*")
            if policy.allowing(iam.Request("s3:PutObject", f"<RecordsBucket.Arn>/{k[:-1]}x", context))
        ]
        print(f"{role}: " + "; ".join(f"{a} {', '.join(v) or '-'}" for a, v in row.items()))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "template.yaml"))
