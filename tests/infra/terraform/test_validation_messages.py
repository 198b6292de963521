"""What a user sees for bad input. terraform test (tests/validation.tftest.hcl) proves that each bad
field makes the whole plan fail on its owning variable and nothing else, but never shows the
message. Here every expect_failures run's variables go to `terraform console` over the root
variables.tf, with terraform.tfvars copied from the example as a user does: exactly one rule fails,
of that variable, and its message names the field and the allowed values. (The validations read
only variables, so they evaluate alone: 0.1 s a run instead of several seconds for the full
configuration, with no provider involved.)"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import hcl2
import pytest
from hcl2 import SerializationOptions

TF_ROOT = Path(__file__).resolve().parents[3] / "infra" / "terraform"
OPTIONS = SerializationOptions(strip_string_quotes=True, explicit_blocks=False)

# The message each bad input must get (a part that names the field and the allowed values).
EXPECTED = {
    "gp3_throughput_over_1000": (
        "pools",
        "pools.*.cache_throughput_mibps must be an integer from 125 to 1000 (gp3 throughput in MiB/s).",
    ),
    "gp3_throughput_under_125": (
        "pools",
        "pools.*.cache_throughput_mibps must be an integer from 125 to 1000 (gp3 throughput in MiB/s).",
    ),
    "gp3_iops_over_16000": ("pools", "pools.*.cache_iops must be an integer from 3000 to 16000 (gp3 IOPS)."),
    "gp3_throughput_over_a_quarter_of_iops": ("pools", "pools.*.cache_throughput_mibps may be at most pools.*.cache_iops / 4"),
    "tensor_parallel_over_the_pools_gpus": (
        "profiles",
        "profiles.*.vllm.tensor_parallel_size must be 1..gpu_count of the profile's pool",
    ),
    "profile_on_an_unknown_pool": ("profiles", "profiles.*.pool must name a key of pools."),
    "neither_weights_gb_nor_model_load_s": (
        "profiles",
        "profiles.*.weights_gb (checkpoint size in GB, to derive the load time) or profiles.*.model_load_s must be set.",
    ),
    "weights_gb_zero": ("profiles", "profiles.*.weights_gb must be a checkpoint size in GB, above 0 and at most 8192."),
    "model_load_s_under_60": ("profiles", "profiles.*.model_load_s (ECS health-check grace period) must be 60..7200 seconds."),
    "speculative_tokens_over_8": ("profiles", "profiles.*.vllm.speculative_tokens must be an integer from 0 to 8."),
    "unknown_weights_source": (
        "profiles",
        "profiles.*.weights_source must be s3 (prefetch through the S3 gateway endpoint) or hub (download through NAT).",
    ),
    "s3_weights_without_a_bucket": (
        "profiles",
        (
            'a profile has weights_source = "s3" but model_weights_bucket is null: '
            'set model_weights_bucket or weights_source = "hub".'
        ),
    ),
    "reserved_name_prefix": ("name", "name must match ^[a-z][a-z0-9-]{1,22}$ and must not start with aws, ecs or fargate"),
    "client_cidr_open_to_the_world": ("client_cidrs", "client_cidrs must be IPv4 CIDRs inside the VPC; 0.0.0.0/0 is refused"),
    "zones_of_another_region": (
        "availability_zones",
        'availability_zones must name exactly two different zones of var.region, e.g. ["us-east-1a", "us-east-1b"].',
    ),
    "max_runtime_below_the_default_lease": ("profiles", "max_runtime_minutes null or default_lease_minutes..44640"),
    "task_cpu_under_256": ("profiles", "profiles.*.task_cpu must be an integer from 256 to 196608"),
    "task_cpu_over_196608": ("profiles", "profiles.*.task_cpu must be an integer from 256 to 196608"),
    "max_model_len_zero": (
        "profiles",
        "profiles.*.vllm.max_num_batched_tokens and profiles.*.vllm.max_model_len must be null (vLLM's default) or at least 1.",
    ),
    "default_lease_over_7_days": (
        "profiles",
        "profiles.*.default_lease_minutes must be 5..max_lease_minutes and at most 10080 (7 days)",
    ),
    "idle_window_under_5": ("profiles", "profiles.*.idle.window_minutes must be 5..1440"),
    "idle_window_over_1440": ("profiles", "profiles.*.idle.window_minutes must be 5..1440"),
    "start_task_timeout_zero": (
        "profiles",
        "profiles.*.start: capacity_timeout_s, task_timeout_s and health_timeout_s must be positive seconds",
    ),
    "schedule_time_past_23_59": ("profiles", "begin_time and end_time as HH:MM (00:00..23:59) or null"),
    "schedule_unknown_weekday": ("profiles", "weekdays from mon, tue, wed, thu, fri, sat, sun"),
    "schedule_month_day_32": ("profiles", "month_days from 1 to 31"),
    "schedule_unknown_override": ("profiles", "override must be null, running or stopped."),
    "four_alternates": ("pools", "pools.*.alternate_instance_types must list at most 3 distinct instance types"),
    "alternate_of_another_gpu_memory": (
        "pools",
        "each in gpu_shapes with the same GPU count and GPU memory as pools.*.instance_type",
    ),
    "gpu_count_unlike_the_shape": (
        "pools",
        "pools.*.gpu_count must equal gpu_shapes[pools.*.instance_type].gpus when gpu_shapes lists the type.",
    ),
    "warm_pool_min_size_2": ("pools", "pools.*.warm_pool.min_size must be 0 (one stopped instance while the pool rests) or 1"),
    "schedule_without_periods": ("profiles", "profiles.*.schedule: periods must hold at least one period"),
}


def _validation_file() -> dict:
    """tests/validation.tftest.hcl as python-hcl2 reads it."""
    with (TF_ROOT / "tests" / "validation.tftest.hcl").open() as handle:
        return hcl2.load(handle, serialization_options=OPTIONS)


def _runs() -> dict[str, dict]:
    """Run blocks by name."""
    return {name: run for block in _validation_file()["run"] for name, run in block.items()}


def _variables_of(run: str) -> dict:
    """The variables terraform test gives `run`: the file's, overridden per variable by the run's."""
    (base,) = _validation_file()["variables"]
    return {**base, **(_runs()[run].get("variables") or [{}])[0]}


def _variable_at(line: int) -> str:
    """Name of the variable block of the root variables.tf that holds `line`."""
    starts = [(n, m.group(1)) for n, text in enumerate((TF_ROOT / "variables.tf").read_text().splitlines(), 1)
              if (m := re.match(r'variable "(\w+)"', text))]  # fmt: skip
    return [name for start, name in starts if start <= line][-1]


@pytest.fixture
def variables_dir(tmp_path: Path) -> Path:
    """The root variables.tf alone, with terraform.tfvars copied from the example."""
    shutil.copyfile(TF_ROOT / "variables.tf", tmp_path / "variables.tf")
    shutil.copyfile(TF_ROOT / "terraform.tfvars.example", tmp_path / "terraform.tfvars")
    return tmp_path


def refusals(tf, directory: Path, variables: dict) -> list[tuple[str, str]]:
    """(variable, message) of every validation error the console reports for these variables."""
    var_file = directory / "run.tfvars.json"
    var_file.write_text(json.dumps(variables))
    proc = tf.run("console", "-no-color", f"-var-file={var_file}", cwd=directory, stdin="1\n", timeout=120)
    errors = re.split(r"\nError: ", proc.stdout + proc.stderr)[1:]
    found = []
    for error in errors:
        rule = re.search(r"This was checked by the validation rule at (\S+):(\d+),", error)
        assert error.startswith("Invalid value for variable") and rule, f"not a validation error: {error}"
        assert rule.group(1) == "variables.tf", error
        # The message is the paragraph before "This was checked...", wrapped by terraform.
        message = " ".join(error[: rule.start()].strip().split("\n\n")[-1].split())
        found.append((_variable_at(int(rule.group(2))), message))
    return found


def test_every_rejection_run_has_an_expected_message() -> None:
    rejections = {name for name, run in _runs().items() if run.get("expect_failures")}
    assert rejections == set(EXPECTED)
    for name, (variable, _) in EXPECTED.items():
        assert _runs()[name]["expect_failures"] == [f"${{var.{variable}}}"], name


def test_the_valid_base_is_accepted(tf, variables_dir: Path) -> None:
    assert refusals(tf, variables_dir, _variables_of("minimal_base_is_valid")) == []


@pytest.mark.parametrize("run", sorted(EXPECTED))
def test_bad_input_is_refused_with_its_message(tf, variables_dir: Path, run: str) -> None:
    variable, message = EXPECTED[run]
    found = refusals(tf, variables_dir, _variables_of(run))
    assert len(found) == 1, f"one bad field, one error expected: {found}"
    ((refused_by, printed),) = found
    assert refused_by == variable
    assert message in printed, printed
