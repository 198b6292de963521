"""Fault flags: accepted values, and errors that name the flag and the allowed values."""

import pytest

from servingctl_twin.simserver import FaultError, parse_faults


def test_all_faults_parse_and_repeat():
    faults = parse_faults(["error-rate=0.1", "stream-cut=0.2", "stall=1.5", "malformed=1"], seed=7)
    assert (faults.error_rate, faults.stream_cut, faults.stall_s, faults.malformed, faults.seed) == (0.1, 0.2, 1.5, 1.0, 7)


def test_no_faults_means_all_off():
    faults = parse_faults([])
    assert (faults.error_rate, faults.stream_cut, faults.stall_s, faults.malformed) == (0, 0, 0, 0)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("slow-start=1", "--fault 'slow-start=1': expected NAME=VALUE with NAME one of: error-rate="),
        ("error-rate", "expected NAME=VALUE"),
        ("stall=soon", "--fault stall: 'soon' is not a number"),
        ("error-rate=1.5", "--fault error-rate: 1.5 out of range"),
        ("stall=-1", "--fault stall: -1.0 out of range"),
    ],
)
def test_bad_fault_names_the_flag_and_allowed_values(spec, message):
    with pytest.raises(FaultError) as info:
        parse_faults([spec])
    assert message in str(info.value)
    if "NAME one of" in message:
        for name in ("error-rate", "stream-cut", "stall", "malformed"):
            assert name in str(info.value)
