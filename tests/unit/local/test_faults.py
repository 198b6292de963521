"""The twin's fault names: known ones pass, capacity-unavailable may name one instance type, anything
else is refused with the allowed values."""

from __future__ import annotations

import pytest

from servingctl.local.faults import FAULTS, check_fault


@pytest.mark.parametrize("fault", [*FAULTS, "capacity-unavailable=g7e.2xlarge", "capacity-unavailable=p5en.48xlarge"])
def test_known_faults_pass_as_given(fault: str) -> None:
    assert check_fault(fault) == fault


@pytest.mark.parametrize(("fault", "message"), [
    ("capacity-gone", r"fault: unknown 'capacity-gone'; allowed values: \['capacity-unavailable', .*'capacity-unavailable=<an EC2 instance type"),
    ("task-crash=g7e.2xlarge", r"fault: unknown 'task-crash=g7e.2xlarge'"),
    ("capacity-unavailable=G7E", r"fault capacity-unavailable: 'G7E' is not an EC2 instance type, e.g. g7e.2xlarge"),
    ("capacity-unavailable=", r"fault capacity-unavailable: '' is not an EC2 instance type"),
])  # fmt: skip
def test_bad_faults_are_refused_naming_the_allowed_values(fault: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_fault(fault)
