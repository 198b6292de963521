"""checkov over infra/terraform: no failed check, no parsing error, every module scanned, and
skips only where the code says why (one checkov run per session)."""

from __future__ import annotations


def test_no_failed_check(checkov_report: dict) -> None:
    failed = [
        f"{c['check_id']} {c['resource']} ({c['file_path']}): {c['check_name']}"
        for c in checkov_report["results"]["failed_checks"]
    ]
    assert failed == []
    assert checkov_report["summary"]["failed"] == 0


def test_no_parsing_error(checkov_report: dict) -> None:
    # checkov exits 0 on HCL it cannot parse: the summary is the only signal.
    assert checkov_report["summary"]["parsing_errors"] == 0
    assert checkov_report["results"].get("parsing_errors", []) == []


def test_every_module_instance_was_scanned(checkov_report: dict) -> None:
    scanned = {c["resource"] for kind in ("passed_checks", "skipped_checks") for c in checkov_report["results"][kind]}
    prefixes = (
        "module.network.",
        "module.alb.",
        "module.cluster.",
        'module.pool["g7e-2gpu"].',
        'module.profile["deepseek-v4-flash"].',
        'module.profile["nemotron-nano"].',
        "aws_ssm_parameter.registry",
    )
    for prefix in prefixes:
        assert any(r.startswith(prefix) for r in scanned), f"checkov scanned nothing under {prefix}"
    assert checkov_report["summary"]["passed"] > 100


def test_skips_are_suppressed_in_code_with_a_reason(checkov_report: dict) -> None:
    for check in checkov_report["results"]["skipped_checks"]:
        reason = (check.get("check_result") or {}).get("suppress_comment", "")
        assert len(reason) > 10, f"{check['check_id']} on {check['resource']} is skipped without a reason"
