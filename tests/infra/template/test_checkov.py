"""checkov over template.yaml (CloudFormation framework, SAM resources included): no failed check,
no parsing error, every resource scanned, and every skip carried in the template with its reason.
One checkov run per session; the binary is the checkov venv's ($SERVINGCTL_CHECKOV)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def report() -> dict:
    """checkov's JSON report of template.yaml."""
    checkov = Path(os.environ.get("SERVINGCTL_CHECKOV") or ROOT / ".venv-checkov/bin/checkov")
    if not checkov.exists():
        pytest.fail(f"{checkov} is missing: run `make checkov` (or set SERVINGCTL_CHECKOV)")
    result = subprocess.run(
        [str(checkov), "-f", str(ROOT / "template.yaml"), "--framework", "cloudformation", "--compact", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    parsed = json.loads(result.stdout)
    found = parsed[0] if isinstance(parsed, list) else parsed
    summary = found["summary"]
    print(f"checkov template.yaml: passed {summary['passed']}, failed {summary['failed']}, skipped {summary['skipped']}")
    return found


def test_no_failed_check_and_no_parsing_error(report: dict) -> None:
    failed = [f"{c['check_id']} {c['resource']}: {c['check_name']}" for c in report["results"]["failed_checks"]]
    assert failed == []
    assert report["summary"]["failed"] == 0 and report["summary"]["parsing_errors"] == 0


def test_every_resource_is_scanned(report: dict) -> None:
    from cfnlint.decode import decode

    scanned = {c["resource"].split(".", 1)[1] for kind in ("passed_checks", "skipped_checks") for c in report["results"][kind]}
    resources = decode(str(ROOT / "template.yaml"))[0]["Resources"]
    # Resource types checkov has checks for; the rest (alarms, the layer, subscriptions) have none.
    checked_types = {r["Type"] for n, r in resources.items() if n in scanned}
    assert {
        "AWS::Serverless::Function",
        "AWS::Serverless::Api",
        "AWS::DynamoDB::Table",
        "AWS::S3::Bucket",
        "AWS::SQS::Queue",
        "AWS::Logs::LogGroup",
        "AWS::IAM::Role",
    } <= checked_types
    assert report["summary"]["passed"] > 50


def test_skips_are_in_the_template_with_a_reason(report: dict) -> None:
    for check in report["results"]["skipped_checks"]:
        reason = (check.get("check_result") or {}).get("suppress_comment", "")
        assert len(reason) > 30, f"{check['check_id']} on {check['resource']} is skipped without a reason"
