"""Each function's settings: read once from its environment, a variable missing or malformed failing
with its name; and no product module but servingctl.shared.environment reads os.environ."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from servingctl.shared.environment import (
    ApiSettings,
    BenchTaskSettings,
    BenchWorkerSettings,
    ProfileStepsSettings,
    SettingsError,
    SweepSettings,
)

ROOT = Path(__file__).resolve().parents[3]
BASE = {"SERVINGCTL_REGISTRY": "ssm:/servingctl/registry", "SERVINGCTL_TABLE": "servingctl", "AWS_REGION": "eu-west-1"}
MACHINES = {
    "START_STATE_MACHINE_ARN": "arn:aws:states:eu-west-1:123456789012:stateMachine:start",
    "STOP_STATE_MACHINE_ARN": "arn:aws:states:eu-west-1:123456789012:stateMachine:stop",
}


def test_a_function_with_its_variables_gets_them_typed() -> None:
    steps = ProfileStepsSettings.from_env(BASE | {"PATH": "/usr/bin"})  # the runtime's own variables are ignored
    assert (steps.registry, steps.table, steps.region) == ("ssm:/servingctl/registry", "servingctl", "eu-west-1")
    api = ApiSettings.from_env(BASE | MACHINES)
    assert (api.bench_machine_arn, api.records_bucket, api.bench_task_definition) == ("", "", "")  # optional: unset is ""
    sweep = SweepSettings.from_env(BASE | MACHINES | {"SERVINGCTL_STOP_POLL": '{"interval_s": 2, "max_interval_s": 4}'})
    assert sweep.stop_poll is not None and (sweep.stop_poll.interval_s, sweep.stop_poll.max_interval_s) == (2, 4)
    assert SweepSettings.from_env(BASE | MACHINES).stop_poll is None


def test_a_missing_variable_fails_naming_each_one() -> None:
    with pytest.raises(SettingsError, match=r"^ApiSettings: SERVINGCTL_TABLE: not set; START_STATE_MACHINE_ARN: not set$"):
        ApiSettings.from_env(
            {k: v for k, v in (BASE | MACHINES).items() if k not in ("SERVINGCTL_TABLE", "START_STATE_MACHINE_ARN")}
        )
    with pytest.raises(SettingsError, match=r"SERVINGCTL_BENCH_EVENT: not set"):
        BenchTaskSettings.from_env(BASE | {"SERVINGCTL_BUCKET": "records"})
    # Set but empty is not set.
    with pytest.raises(SettingsError, match=r"SERVINGCTL_BUCKET: String should have at least 1 character"):
        BenchWorkerSettings.from_env(BASE | {"SERVINGCTL_BUCKET": ""})


def test_the_region_is_aws_region_else_aws_default_region_else_an_error() -> None:
    others = {k: v for k, v in BASE.items() if k != "AWS_REGION"}
    assert ProfileStepsSettings.from_env(others | {"AWS_DEFAULT_REGION": "us-west-2"}).region == "us-west-2"
    both = BASE | {"AWS_DEFAULT_REGION": "us-west-2"}
    assert ProfileStepsSettings.from_env(both).region == "eu-west-1"
    with pytest.raises(SettingsError, match="AWS_REGION: not set"):
        ProfileStepsSettings.from_env(others)


def test_a_malformed_stop_poll_names_the_variable_and_the_field() -> None:
    with pytest.raises(SettingsError, match=r"SERVINGCTL_STOP_POLL: .*max_interval_s must be >= interval_s"):
        SweepSettings.from_env(BASE | MACHINES | {"SERVINGCTL_STOP_POLL": '{"interval_s": 9, "max_interval_s": 3}'})
    with pytest.raises(SettingsError, match=r"SERVINGCTL_STOP_POLL.backoff: Input should be greater than or equal to 1"):
        SweepSettings.from_env(BASE | MACHINES | {"SERVINGCTL_STOP_POLL": '{"backoff": 0.5}'})
    with pytest.raises(SettingsError, match=r"SERVINGCTL_STOP_POLL: .*Expecting value"):
        SweepSettings.from_env(BASE | MACHINES | {"SERVINGCTL_STOP_POLL": "fast"})


def _reads_environ(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    return any(
        isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv") and getattr(node.value, "id", None) == "os"
        for node in ast.walk(tree)
    )


def test_only_the_settings_module_reads_the_environment_in_the_product() -> None:
    product = [*(ROOT / "layers/core/servingctl").rglob("*.py"), *(ROOT / "functions").rglob("*.py")]
    assert len(product) > 50
    readers = sorted(str(p.relative_to(ROOT)) for p in product if _reads_environ(p))
    assert readers == ["layers/core/servingctl/shared/environment.py"]
    # The command line reads its own through its settings and its config file's precedence (flag > env > file).
    cli = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "cli/servingctl_cli").glob("*.py") if _reads_environ(p))
    assert cli == ["cli/servingctl_cli/config.py", "cli/servingctl_cli/settings.py"]
