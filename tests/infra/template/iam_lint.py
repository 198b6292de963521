"""Scan IAM policies with cloudsplaining, printed as JSON.

Run by the tests with the linter venv's Python (.venv-cloudsplaining, pinned by
requirements/cloudsplaining.txt; its policy_sentry and boto3 pins clash with the main venv):
`python iam_lint.py < policies.json` where the input is {name: policy document}; the output is
{name: {risk: [actions]}} for every risk cloudsplaining finds (missing resource constraints:
privilege escalation, resource exposure, data exfiltration, credentials exposure, service
wildcards, infrastructure modification = write access on Resource "*"), statements with a
Condition included (-aR's flag_conditional_statements: a condition is no excuse here).
"""

import json
import sys

from cloudsplaining.command.scan_policy_file import scan_policy

RISKS = (
    "PrivilegeEscalation",
    "ResourceExposure",
    "DataExfiltration",
    "CredentialsExposure",
    "ServiceWildcard",
    "InfrastructureModification",
)


def main() -> None:
    """Read {name: policy} on stdin, print {name: {risk: [actions]}} (risks with findings only)."""
    policies = json.load(sys.stdin)
    found = {}
    for name, policy in sorted(policies.items()):
        results = scan_policy(policy, exclusions_config={}, flag_conditional_statements=True)
        risks = {}
        for risk in RISKS:
            findings = (results.get(risk) or {}).get("findings") or []
            actions = sorted({f if isinstance(f, str) else f.get("type", json.dumps(f)) for f in findings})
            if actions:
                risks[risk] = actions
        found[name] = risks
    json.dump(found, sys.stdout, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
