"""The run_benchmark input: defaults for everything but the profile, clear errors naming the field
and the allowed values, and the bounds that keep one scenario inside a Lambda worker's 15 minutes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servingctl.registry.loader import parse_registry
from servingctl.runs.matrix import (
    LAMBDA_BUDGET_S,
    LAMBDA_TIMEOUT_S,
    BenchmarkInput,
    estimate_seconds,
    parse_benchmark_input,
    plan_scenarios,
    run_config,
)
from servingctl.shared.errors import InvalidInput

ROOT = Path(__file__).resolve().parents[3]
REFERENCE_REGISTRY = ROOT / "twin/servingctl_twin/reference_registry.json"
REGISTRY = parse_registry(REFERENCE_REGISTRY.read_text())
DEEPSEEK = REGISTRY.profiles["deepseek-v4-flash"]


def test_only_the_profile_is_required_and_the_defaults_are_the_references_method() -> None:
    given = parse_benchmark_input({"profile": "deepseek-v4-flash"})
    assert (given.input_tokens, given.concurrencies, given.mode) == ([256, 2048, 8192], [1, 2, 4], "burst")
    assert (given.warmup, given.rounds, given.max_tokens, given.seed, given.salt_mode) == (2, 5, 256, 42, "cache-salt")
    assert (given.start, given.stop, given.runner) == (False, False, "auto")
    planned = plan_scenarios(given, DEEPSEEK, ecs_available=False)
    assert [s.name for s in planned] == [
        "in256-c1",
        "in256-c2",
        "in256-c4",
        "in2048-c1",
        "in2048-c2",
        "in2048-c4",
        "in8192-c1",
        "in8192-c2",
        "in8192-c4",
    ]
    assert [s.position for s in planned] == list(range(9))
    assert {s.runner for s in planned} == {"lambda"} and max(s.estimate_s for s in planned) <= LAMBDA_BUDGET_S < LAMBDA_TIMEOUT_S


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "profile: required"),
        ({"profile": "p", "concurency": [1]}, "concurency: unknown field; allowed fields: profile, input_tokens, concurrencies"),
        ({"profile": "p", "mode": "fast"}, "mode: Input should be 'burst', 'sustained' or 'rate'"),
        ({"profile": "p", "input_tokens": [256, 256]}, "input_tokens: duplicate values [256, 256]"),
        ({"profile": "p", "input_tokens": [0]}, "input_tokens: [0]; allowed: integers 1..262144"),
        ({"profile": "p", "concurrencies": [1, 512]}, "concurrencies: [1, 512]; allowed: integers 1..256"),
        ({"profile": "p", "concurrencies": list(range(1, 10))}, "concurrencies: List should have at most 8 items"),
        ({"profile": "p", "rounds": 0}, "rounds: Input should be greater than or equal to 1 (got 0)"),
        ({"profile": "p", "max_tokens": "256"}, "max_tokens: Input should be a valid integer (got '256')"),
        ({"profile": "p", "mode": "rate", "requests": 10}, "rate: required when mode is rate"),
        ({"profile": "p", "mode": "sustained"}, "requests or duration_s: mode sustained needs one of them"),
        ({"profile": "p", "requests": 10}, "requests, duration_s: only for modes sustained and rate"),
        ({"profile": "p", "runner": "k8s"}, "runner: Input should be 'auto', 'lambda' or 'ecs'"),
        ({"profile": "p", "max_workers": 9}, "max_workers: Input should be less than or equal to 8"),
        ({"profile": "p", "run_id": "../etc"}, "run_id: String should match pattern"),
        (
            {
                "profile": "p",
                "sweep": True,
                "mode": "rate",
                "rate": 2,
                "requests": 10,
                "input_tokens": [64],
                "slos": [{"metric": "ttft_ms", "limit": 500}],
            },
            "mode: the in-VPC sweep varies concurrency; use burst or sustained (a rate sweep runs from a machine that "
            "reaches the endpoint: servingctl bench --endpoint URL --model NAME --sweep --mode rate)",
        ),
        ({"profile": "p", "warmup_s": 3601}, "warmup_s: Input should be less than or equal to 3600"),
        ({"profile": "p", "warmup_s": 0}, "warmup_s: Input should be greater than 0"),
        ({"profile": "p", "warmup": 2, "warmup_s": 30}, "warmup, warmup_s: warm-up by rounds or by time, not both"),
        (["profile"], "expected a JSON object"),
    ],
)
def test_bad_input_names_the_field_and_what_is_allowed(data, message: str) -> None:
    with pytest.raises(InvalidInput, match="invalid input") as err:
        parse_benchmark_input(data)
    assert message in str(err.value)


def test_estimate_is_pessimistic_and_grows_with_every_load_setting() -> None:
    given = BenchmarkInput(profile="p", input_tokens=[2048], concurrencies=[4])
    # prompts of a round prefilled one after another at 1000 tok/s, 256 tokens at 10 tok/s each
    assert estimate_seconds(given, 2048, 4) == pytest.approx((2 + 5) * (2048 * 4 / 1000 + 256 / 10))
    longer = given.model_copy(update={"rounds": 10})
    assert estimate_seconds(longer, 2048, 4) > estimate_seconds(given, 2048, 4)
    sustained = BenchmarkInput(profile="p", mode="sustained", requests=40, warmup=0)
    assert estimate_seconds(sustained, 256, 4) == pytest.approx(10 * (256 * 4 / 1000 + 25.6))
    timed = BenchmarkInput(profile="p", mode="rate", rate=2.0, duration_s=60.0, warmup=0)
    assert estimate_seconds(timed, 256, 4) == pytest.approx(60 + 256 * 4 / 1000 + 25.6)


def test_a_warm_up_by_time_is_counted_in_the_estimate_and_passed_to_the_engine() -> None:
    rounds = BenchmarkInput(profile="p", input_tokens=[256], concurrencies=[4], warmup=0)
    timed = parse_benchmark_input({"profile": "p", "input_tokens": [256], "concurrencies": [4], "warmup_s": 3600})
    one = 256 * 4 / 1000 + 25.6  # a request started just before the warm-up's end still runs to its end
    assert estimate_seconds(timed, 256, 4) == pytest.approx(estimate_seconds(rounds, 256, 4) + 3600 + one)
    config = run_config(timed, DEEPSEEK)
    assert (config.warmup, config.warmup_s) == (0, 3600.0)
    assert (run_config(rounds, DEEPSEEK).warmup, run_config(rounds, DEEPSEEK).warmup_s) == (0, None)


def test_a_scenario_too_long_for_lambda_is_refused_naming_the_fields_to_change() -> None:
    given = parse_benchmark_input(
        {"profile": "deepseek-v4-flash", "input_tokens": [8192], "concurrencies": [4], "rounds": 15, "runner": "lambda"}
    )
    with pytest.raises(InvalidInput) as err:
        plan_scenarios(given, DEEPSEEK, ecs_available=True)
    text = str(err.value)
    assert "scenario in8192-c4: about 992 s at 10 tok/s per request (expected_tok_s)" in text
    assert f"more than the {LAMBDA_BUDGET_S} s a Lambda worker may take" in text
    assert "lower rounds, requests, duration_s or max_tokens" in text and 'use runner "auto" or "ecs"' in text
    # a person who knows the server is faster says so, and the same matrix fits
    faster = given.model_copy(update={"expected_tok_s": 40.0})
    assert {s.runner for s in plan_scenarios(faster, DEEPSEEK, ecs_available=False)} == {"lambda"}


def test_auto_sends_only_the_long_scenarios_to_ecs_when_it_is_deployed() -> None:
    given = parse_benchmark_input(
        {"profile": "deepseek-v4-flash", "input_tokens": [256, 8192], "concurrencies": [4], "rounds": 20}
    )
    planned = plan_scenarios(given, DEEPSEEK, ecs_available=True)
    assert [(s.name, s.runner) for s in planned] == [("in256-c4", "lambda"), ("in8192-c4", "ecs")]
    with pytest.raises(InvalidInput, match="the ECS benchmark task is not deployed \\(set the BenchImageUri parameter\\)"):
        plan_scenarios(given, DEEPSEEK, ecs_available=False)
    everything = given.model_copy(update={"runner": "ecs"})
    assert {s.runner for s in plan_scenarios(everything, DEEPSEEK, ecs_available=True)} == {"ecs"}


def test_even_ecs_has_a_bound() -> None:
    given = parse_benchmark_input(
        {"profile": "deepseek-v4-flash", "mode": "sustained", "requests": 100_000, "concurrencies": [1]}
    )
    with pytest.raises(InvalidInput, match="more than the 14400 s any worker may take"):
        plan_scenarios(given, DEEPSEEK, ecs_available=True)


def test_input_and_output_must_fit_the_profiles_context() -> None:
    given = parse_benchmark_input({"profile": "deepseek-v4-flash", "input_tokens": [256, 16384], "max_tokens": 256})
    with pytest.raises(
        InvalidInput,
        match=r"input_tokens \[16384\] \+ max_tokens 256 exceed the profile's max_model_len 16384; "
        r"allowed input_tokens: 1..16128",
    ):
        plan_scenarios(given, DEEPSEEK, ecs_available=False)


def test_too_many_scenarios_are_refused() -> None:
    given = parse_benchmark_input(
        {"profile": "deepseek-v4-flash", "input_tokens": [1, 2, 3, 4, 5, 6], "concurrencies": [1, 2, 3, 4, 5, 6]}
    )
    with pytest.raises(InvalidInput, match="36 scenarios; allowed: at most 32"):
        plan_scenarios(given, DEEPSEEK, ecs_available=False)


def test_run_config_targets_the_profile_through_its_routing_header() -> None:
    given = parse_benchmark_input(
        {"profile": "deepseek-v4-flash", "input_tokens": [256], "concurrencies": [2], "salt_mode": "prompt-nonce"}
    )
    config = run_config(given, DEEPSEEK)
    assert config.endpoint == DEEPSEEK.endpoint_url and config.model == DEEPSEEK.model
    assert config.headers == {"X-LLM-Profile": "deepseek-v4-flash"}
    assert (config.input_tokens, config.concurrencies, config.salt_mode, config.seed) == ([256], [2], "prompt-nonce", 42)


@pytest.mark.parametrize("path", sorted((ROOT / "events/run_benchmark").glob("*.json")), ids=lambda p: p.name)
def test_every_sample_console_input_is_valid_and_plans_on_the_reference_registry(path: Path) -> None:
    given = parse_benchmark_input(json.loads(path.read_text()))
    planned = plan_scenarios(given, REGISTRY.profiles[given.profile], ecs_available=False)
    assert planned and all(s.runner == "lambda" for s in planned)
