"""The twin's fault names: known ones pass, capacity-unavailable may name one instance type and a class
of launch failure, anything else is refused with the allowed values (by the CLI and the Twin alike)."""

from __future__ import annotations

import re

import pytest

from servingctl_cli.main import build_parser
from servingctl_twin.faults import FAULTS, LAUNCH_FAILURES, check_fault
from servingctl_twin.twin import Twin


@pytest.mark.parametrize(
    "fault",
    [
        *FAULTS,
        "capacity-unavailable=g7e.2xlarge",
        "capacity-unavailable=p5en.48xlarge",
        *(f"capacity-unavailable=g7e.2xlarge:{kind}" for kind in LAUNCH_FAILURES),
    ],
)
def test_known_faults_pass_as_given(fault: str) -> None:
    assert check_fault(fault) == fault
    # `servingctl local up --fault ...` builds its Twin with them (it used to refuse any NAME=ARG form).
    assert Twin(faults=[fault]).faults == (fault,)


def test_local_up_help_lists_every_class_of_launch_failure(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["local", "up", "--help"])
    text = re.sub(r"-\s+", "-", " ".join(capsys.readouterr().out.split()))  # argparse wraps at hyphens
    assert all(kind in text for kind in LAUNCH_FAILURES) and "capacity-unavailable=TYPE:CLASS" in text


@pytest.mark.parametrize(("fault", "message"), [
    ("capacity-gone", (r"fault: unknown 'capacity-gone'; "
                       r"allowed values: \['capacity-unavailable', .*'capacity-unavailable=<an EC2 instance type")),
    ("task-crash=g7e.2xlarge", r"fault: unknown 'task-crash=g7e.2xlarge'"),
    ("capacity-unavailable=G7E", (r"fault capacity-unavailable: 'G7E' is not an EC2 instance type, optionally :CLASS "
                                  r"\(insufficient-capacity, vcpu-limit, instance-limit, unsupported, launch-template, ami\), "
                                  r"e.g. g7e.2xlarge:vcpu-limit")),
    ("capacity-unavailable=g7e.2xlarge:vcpu", (r"fault capacity-unavailable: 'g7e.2xlarge:vcpu' "
                                               r"is not an EC2 instance type, optionally :CLASS")),
    ("capacity-unavailable=", r"fault capacity-unavailable: '' is not an EC2 instance type"),
])  # fmt: skip
def test_bad_faults_are_refused_naming_the_allowed_values(fault: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_fault(fault)
