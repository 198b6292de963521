"""`servingctl bench` flag validation: a bad flag names itself and the allowed values, exit 2."""

import pytest

from servingctl.loadgen.spread import MAX_PROCESSES
from servingctl.schema.results import RunConfig
from servingctl_cli import bench as bench_cli
from servingctl_cli.main import build_parser, main

BASE = ["bench", "--endpoint", "http://127.0.0.1:1", "--model", "m"]


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--mode", "fast"], ["--mode", "burst", "sustained", "rate"]),
        (["--salt-mode", "random"], ["--salt-mode", "cache-salt", "prompt-nonce", "none"]),
        (["--concurrency", "1,x"], ["--concurrency", "positive integers"]),
        (["--input-tokens", "0"], ["--input-tokens", "positive integers"]),
        (["--max-failure-rate", "2"], ["--max-failure-rate", "0 to 1"]),
        (["--header", "no-colon"], ["--header", "NAME:VALUE"]),
        (["--mode", "rate"], ["error: --rate: required in mode rate (the arrival rate in requests per second)"]),
        (["--mode", "sustained"], ["error: --requests or --duration: mode sustained needs one of them"]),
        (["--rounds", "0"], ["--rounds", ">= 1"]),
    ],
)
def test_bad_flags_exit_2_naming_flag_and_allowed_values(capsys, extra, expected):
    with pytest.raises(SystemExit) as exit_info:
        main(BASE + extra)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    for text in expected:
        assert text in err


@pytest.mark.parametrize("value", ["65", "0", "x", "nan"])
def test_processes_past_the_limit_or_not_a_number_are_refused_in_one_form(capsys, value):
    with pytest.raises(SystemExit) as exit_info:
        main([*BASE, "--processes", value])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"servingctl bench: error: argument --processes: '{value}': expected an integer from 1 to {MAX_PROCESSES}"
    )


def test_processes_at_the_limit_is_accepted():
    assert MAX_PROCESSES == 64  # the limit; "65" above is one past it
    assert build_parser().parse_args([*BASE, "--processes", "64"]).processes == 64


@pytest.mark.parametrize(
    ("flag", "value", "allowed"),
    [
        ("--rounds", "0", "an integer >= 1"),
        ("--rounds", "two", "an integer >= 1"),
        ("--max-failure-rate", "1.5", "a number from 0 to 1"),
        ("--max-failure-rate", "nan", "a number from 0 to 1"),
        ("--timeout", "0", "a positive number of seconds"),
        ("--timeout", "soon", "a positive number of seconds"),
    ],
)
def test_every_bounded_flag_refuses_in_the_same_form(capsys, flag, value, allowed):
    with pytest.raises(SystemExit):
        main([*BASE, flag, value])
    assert f"error: argument {flag}: '{value}': expected {allowed}" in capsys.readouterr().err


WARMUP_ALLOWED = (
    "expected warm-up rounds (an integer >= 0, e.g. 2; 0: none) or seconds of warm-up load "
    "(a number above 0 and at most 3600 followed by s, e.g. 30s)"
)


# 3601s: one past the limit (3600s is accepted below); 0s: none is --warmup 0.
@pytest.mark.parametrize("value", ["-1", "0s", "3601s", "-5s", "30m", "s", "x", "nans", "1.5"])
def test_a_malformed_or_negative_warmup_is_refused_naming_both_forms(capsys, value):
    with pytest.raises(SystemExit) as exit_info:
        main([*BASE, f"--warmup={value}"])  # '=': argparse would take -5s for a flag
    assert exit_info.value.code == 2
    assert f"error: argument --warmup: '{value}': {WARMUP_ALLOWED}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("value", "rounds", "seconds"),
    [("0", 0, None), ("2", 2, None), ("30s", 0, 30.0), ("0.5s", 0, 0.5), ("3600s", 0, 3600.0)],
)
def test_warmup_takes_rounds_or_seconds_up_to_the_limit(value, rounds, seconds):
    config = bench_cli.config_from_args(build_parser().parse_args([*BASE, "--warmup", value]))
    assert (config.warmup, config.warmup_s, config.warmup_label()) == (rounds, seconds, value)


def test_bad_endpoint_is_named(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--endpoint", "alb.internal", "--model", "m"])
    assert "--endpoint: 'alb.internal' must start with http:// or https://" in capsys.readouterr().err


def test_config_from_flags_redacts_secrets_and_keeps_the_rest():
    args = build_parser().parse_args(
        [
            *BASE,
            "--api-key",
            "sk-1",
            "--header",
            "Authorization:Bearer sk-2",
            "--header",
            "X-LLM-Profile:ds",
            "--input-tokens",
            "256,2048",
            "--concurrency",
            "1,4",
            "--mode",
            "rate",
            "--rate",
            "2.5",
            "--requests",
            "20",
            "--salt-mode",
            "prompt-nonce",
        ]
    )
    config = bench_cli.config_from_args(args)
    assert config.headers == {"Authorization": "<redacted>", "X-LLM-Profile": "ds"}
    assert config.api_key_set and "sk-" not in config.model_dump_json()
    assert (config.input_tokens, config.concurrencies, config.mode, config.rate, config.requests) == (
        [256, 2048],
        [1, 4],
        "rate",
        2.5,
        20,
    )


def test_every_flag_maps_to_a_config_field():
    assert set(bench_cli._FLAGS) <= set(RunConfig.model_fields)


def test_a_dead_endpoint_says_cannot_connect_to_it(capsys):
    code = main([*BASE, "--input-tokens", "8", "--concurrency", "1", "--rounds", "1", "--warmup", "0"])
    err = capsys.readouterr().err
    assert code == 1 and "servingctl bench: error: cannot connect to http://127.0.0.1:1 (" in err
    assert "usage.prompt_tokens" not in err and "None" not in err


def test_dataset_flags_reach_the_config_multi_turn_included(tmp_path):
    args = build_parser().parse_args(
        [*BASE, "--dataset", str(tmp_path / "s.json"), "--dataset-format", "sharegpt", "--num-prompts", "3", "--multi-turn"]
    )
    spec = bench_cli.config_from_args(args).dataset
    assert spec is not None and (spec.format, spec.num_prompts, spec.multi_turn) == ("sharegpt", 3, True)


RATE_SWEEP = [*BASE, "--input-tokens", "64", "--sweep", "--mode", "rate", "--slo", "ttft_ms=500", "--duration", "5"]


def test_a_rate_sweep_caps_in_flight_at_one_concurrency_and_takes_its_bounds():
    args = build_parser().parse_args(
        [*RATE_SWEEP, "--sweep-start-rate", "0.5", "--sweep-max-rate", "40", "--sweep-resolution", "0.05"]
    )
    config = bench_cli.config_from_args(args)
    assert (config.mode, config.rate, config.concurrencies) == ("rate", None, [bench_cli.RATE_SWEEP_CAP])
    assert (config.sweep_start_rate, config.sweep_max_rate, config.sweep_resolution) == (0.5, 40.0, 0.05)
    capped = bench_cli.config_from_args(build_parser().parse_args([*RATE_SWEEP, "--concurrency", "8"]))
    assert capped.concurrencies == [8]


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--concurrency", "1,2"], "--concurrency: a rate sweep caps requests in flight with one value, e.g. 64; got [1, 2]"),
        (["--rate", "4"], "--rate: a rate sweep chooses its rates (from --sweep-start-rate up to --sweep-max-rate); drop it"),
        (
            ["--sweep-start-rate", "20", "--sweep-max-rate", "10"],
            "--sweep-start-rate: 20 is above --sweep-max-rate 10; allowed: at most --sweep-max-rate",
        ),
        (["--sweep-resolution", "0.005"], "argument --sweep-resolution: '0.005': expected a fraction from 0.01 to 1"),
        (["--sweep-max-rate", "0"], "argument --sweep-max-rate: '0': expected requests per second above 0 and at most 10000"),
    ],
)
def test_bad_rate_sweep_input_names_the_flag_and_the_allowed_values(capsys, extra, expected):
    with pytest.raises(SystemExit) as exit_info:
        main([*RATE_SWEEP, *extra])
    assert exit_info.value.code == 2 and expected in " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            [*BASE, "--sweep", "--slo", "ttft_ms=5", "--input-tokens", "64", "--sweep-start-rate", "2"],
            "--sweep-start-rate: only for a rate sweep (--sweep --mode rate); got --sweep with --mode burst",
        ),
        (
            [*BASE, "--sweep-max-rate", "2", "--sweep-resolution", "0.2"],
            "--sweep-max-rate, --sweep-resolution: only for a rate sweep (--sweep --mode rate); got no --sweep",
        ),
        (
            ["bench", "--profile", "p", "--sweep", "--mode", "rate", "--slo", "ttft_ms=5"],
            "--sweep --mode rate: not for a --profile run inside the VPC",
        ),
    ],
)
def test_rate_sweep_flags_outside_a_local_rate_sweep_are_refused(capsys, args, expected):
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2 and expected in " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize(("value", "sent"), [("30s", {"warmup_s": 30.0}), ("3", {"warmup": 3})])
def test_bench_profile_sends_the_warmup_as_rounds_or_seconds(value, sent):
    from types import SimpleNamespace

    from servingctl.runs.matrix import BenchmarkInput
    from servingctl_cli.runs import request_body

    args = build_parser().parse_args(["bench", "--profile", "p", "--warmup", value])
    body = request_body(args, SimpleNamespace(poll=None))
    assert {k: body[k] for k in ("warmup", "warmup_s") if k in body} == sent
    BenchmarkInput.model_validate(body)  # the API takes it as sent
