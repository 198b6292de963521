"""Every listing at the narrowest terminal the CLI supports (40 columns) and one column under it,
and the inputs that used to end in a traceback: bad ports, a closed pipe, a URL that is not the API."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

import servingctl_cli.runs  # noqa: F401 - bound `connect` at import: imported before a test patches it
from servingctl import render
from servingctl_cli import client
from servingctl_cli.main import main

CLI = [sys.executable, "-m", "servingctl_cli.main"]
PROFILES = [
    {
        "name": "deepseek-v4-flash",
        "phase": "READY",
        "pool": "g7e-2gpu",
        "model": "deepseek-ai/DeepSeek-V4-Flash",
        "endpoint_url": "http://internal-alb.example",
        "routing_header": "X-LLM-Profile: deepseek-v4-flash",
        "instance_type": "g7e.12xlarge",
        "hourly_usd": 12.17,
        "lease_deadline": "2026-12-03T11:00:00+00:00",
        "last_error": "the capacity provider could not launch a g7e.12xlarge in us-east-1a (InsufficientInstanceCapacity)",
    },
    {
        "name": "nemotron-nano",
        "phase": "STOPPED",
        "pool": "g7e-1gpu",
        "model": "nvidia/Nemotron-Nano",
        "endpoint_url": "http://internal-alb.example",
        "routing_header": "X-LLM-Profile: nemotron-nano",
        "instance_type": "g7e.2xlarge",
        "hourly_usd": None,
        "lease_deadline": None,
        "last_error": None,
    },
]
RUNS = [
    {
        "run_id": "20261203T090000Z-abc123",
        "profile": "deepseek-v4-flash",
        "status": "SUCCEEDED",
        "finished_at": "2026-12-03T09:10:00+00:00",
        "scenarios": ["in256-c1", "in256-c2"],
        "label": "MTP on",
        "error": None,
    }
]

LEDGER = {
    "sessions": [
        {
            "profile": "deepseek-v4-flash",
            "session_id": "s1",
            "instance_type": "g7e.12xlarge",
            "started_at": "2026-12-03T09:00:00+00:00",
            "stopped_at": "2026-12-03T11:30:00+00:00",
            "open": False,
            "uptime_hours": 2.5,
            "instances": 1,
            "instance_hours": 2.5,
            "hourly_usd": 12.17,
            "cost_usd": 30.43,
            "close_reason": "lease-expired",
        },
        {
            "profile": "nemotron-nano",
            "session_id": "s2",
            "instance_type": "g7e.2xlarge",
            "started_at": "2026-12-03T12:00:00+00:00",
            "stopped_at": None,
            "open": True,
            "uptime_hours": 1234.25,
            "instances": 1,
            "instance_hours": 1234.25,
            "hourly_usd": None,
            "cost_usd": None,
        },
    ],
    "monthly": [
        {"profile": "deepseek-v4-flash", "month": "2026-12", "uptime_hours": 2.5, "cost_usd": 30.43},
        {"profile": "nemotron-nano", "month": "2026-12", "uptime_hours": 1234.25, "cost_usd": None},
    ],
    "total_cost_usd": None,
    "warm_pools": [
        {"pool": "g7e-2gpu", "instances": 2, "volume_gib": 200, "volume_monthly_usd": 20.0, "standing_monthly_usd": 40.0}
    ],
}
LOADED = "model weights loaded into GPU memory by vLLM"


def _phase(mark: str, label: str, seconds: float, since: float) -> dict[str, Any]:
    return {
        "mark": mark,
        "label": label,
        "at": "2026-12-03T09:05:00+00:00",
        "seconds": seconds,
        "since_request_s": since,
        "source": "ECS",
    }


STARTS = {
    "profile": "deepseek-v4-flash",
    "starts": [
        {
            "start_id": "s1",
            "execution": "arn:aws:states:us-east-1:123456789012:execution:servingctl-start-profile:s1",
            "outcome": "READY",
            "requested_at": "2026-12-03T09:00:00+00:00",
            "phases": [
                _phase("instance_launched", "instance launched", 45.2, 45.2),
                _phase("vllm_weights_loaded", LOADED, 312.4, 357.6),
            ],
        },
        {
            "start_id": "s2",
            "execution": "arn:aws:states:us-east-1:123456789012:execution:servingctl-start-profile:s2",
            "outcome": "FAILED",
            "requested_at": "2026-12-04T09:00:00+00:00",
            "error": "InsufficientInstanceCapacity: no g7e.12xlarge in us-east-1a",
            "phases": [],
        },
    ],
    "p50_s": {"instance_launched": 45.2, "vllm_weights_loaded": 312.4},
    "p90_s": {"instance_launched": 45.2},
    "labels": {"instance_launched": "instance launched", "vllm_weights_loaded": LOADED},
}


def fake_api(monkeypatch: pytest.MonkeyPatch, routes: dict[str, Any]) -> None:
    """Commands reach a fake API answering GET path -> JSON (404 for anything else)."""

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path in routes:
            return httpx.Response(200, json=routes[request.url.path])
        return httpx.Response(404, json={"message": f"no route {request.url.path}"})

    monkeypatch.setattr(
        client, "connect", lambda args: client.Client("http://127.0.0.1:1", local=True, transport=httpx.MockTransport(answer))
    )


def _lines(out: str) -> list[str]:
    return out.rstrip("\n").split("\n")


@pytest.mark.parametrize("columns", [40, 39, 60, 200])
@pytest.mark.parametrize(
    ("argv", "routes", "said"),
    [
        (["status"], {"/profiles": PROFILES}, ["deepseek-v4-flash", "nemotron-nano", "no price", "InsufficientInstanceCapacity"]),
        (["runs"], {"/benchmarks": RUNS}, ["20261203T090000Z-abc123", "SUCCEEDED", "label: MTP on"]),
        (["costs", "prices"], {}, ["us-east-1/g7e.12xlarge", "us-east-1/nat-gateway-hour", "fireworks/deepseek-v4-flash"]),
        (["costs", "ledger"], {"/ledger": LEDGER}, ["deepseek-v4-flash", "lease-expired", "1234.25", "unpriced", "g7e-2gpu"]),
        (
            ["starts", "deepseek-v4-flash"],
            {"/profiles/deepseek-v4-flash/starts": STARTS},
            ["12-03 09:00", "FAILED", "InsufficientInstanceCapacity:", "312.4", "instance launched"],
        ),
    ],
)
def test_listings_fit_down_to_40_columns_and_keep_every_value_whole(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    columns: int,
    argv: list[str],
    routes: dict[str, Any],
    said: list[str],
) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    monkeypatch.chdir(tmp_path)  # where `starts` draws its chart
    fake_api(monkeypatch, routes)
    assert main(argv) == 0
    out = capsys.readouterr().out
    # 39 is under the floor: laid out for 40 (the terminal wraps that one column), never a traceback
    assert max(len(line) for line in _lines(out)) <= max(columns, render.MIN_WIDTH)
    for value in said:
        assert value in out  # ids and keys are never cut


def test_starts_say_why_a_start_failed_and_no_nan_for_a_phase_without_a_figure(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.chdir(tmp_path)
    fake_api(monkeypatch, {"/profiles/deepseek-v4-flash/starts": STARTS})
    assert main(["starts", "deepseek-v4-flash"]) == 0
    out = _lines(capsys.readouterr().out)
    failed = out.index("12-04 09:00    FAILED       0.0  -")
    assert out[failed + 1] == "  error: InsufficientInstanceCapacity: no g7e.12xlarge in us-east-1a"
    assert " 45.2   45.2       -  instance launched" in out and "312.4      -       -  " + LOADED in out
    assert not any("nan" in line for line in out)


def test_the_ledger_at_60_columns_is_one_record_per_session(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_api(monkeypatch, {"/ledger": LEDGER})
    monkeypatch.setenv("COLUMNS", "60")
    assert main(["costs", "ledger"]) == 0
    out = _lines(capsys.readouterr().out)
    assert out[:8] == [
        "deepseek-v4-flash",
        "  started (UTC)   12-03 09:00",
        "  instances       1",
        "  instance hours  2.50",
        "  USD/h           12.17",
        "  cost USD        30.43",
        "  session (UTC)   lease-expired 12-03 11:30",
        "nemotron-nano",
    ]
    assert "PROFILE            MONTH      HOURS  COST USD" in out  # the monthly totals still fit as a table


def test_a_table_too_wide_becomes_one_record_per_row(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    fake_api(monkeypatch, {"/profiles": PROFILES})
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["status"]) == 0
    wide = _lines(capsys.readouterr().out)
    assert wide[0].split() == ["PROFILE", "PHASE", "TYPE", "USD/H", "LEASE", "UNTIL", "UTC"]
    monkeypatch.setenv("COLUMNS", "40")
    assert main(["status"]) == 0
    narrow = _lines(capsys.readouterr().out)
    assert narrow[:5] == [
        "deepseek-v4-flash",
        "  phase            READY",
        "  type             g7e.12xlarge",
        "  USD/h            12.17",
        "  lease until UTC  12-03 11:00",
    ]
    assert "nemotron-nano" in narrow and "  USD/h            no price" in narrow


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["local", "up", "--api-port", "65536"], "argument --api-port: 65536 is not a port: must be from 0 to 65535"),
        (["local", "up", "--port", "-1"], "argument --port: -1 is not a port: must be from 0 to 65535"),
        (["local", "up", "--api-port", "70000"], "argument --api-port: 70000 is not a port"),
        (["local", "simserver", "--port", "-1"], "argument --port: -1 is not a port: must be from 0 to 65535"),
        (["local", "simserver", "--port", "http"], "argument --port: 'http' is not a port: must be a whole number"),
    ],
)
def test_a_bad_port_is_one_line_and_exit_2(argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        main(argv)
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err


@pytest.mark.parametrize("port", ["0", "65535"])
def test_the_ports_at_the_limits_are_accepted(port: str) -> None:
    from servingctl.wording import port_number

    assert port_number(port) == int(port)


@pytest.mark.parametrize("argv", [["costs", "prices"], ["--version"]])
def test_a_closed_pipe_is_one_line_and_exit_2(argv: list[str], tmp_path: Path) -> None:
    read, write = os.pipe()
    os.close(read)  # `| head -1` already gone: the first write fails with EPIPE
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    done = subprocess.run([*CLI, *argv], stdout=write, stderr=subprocess.PIPE, text=True, env=env, check=False)
    os.close(write)
    if argv == ["--version"]:  # argparse prints and exits itself: still no traceback
        assert "Traceback" not in done.stderr
        return
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == ["servingctl costs: error: output closed early (the reading end of the pipe went away)"]


@pytest.mark.parametrize(
    ("status", "content_type", "body"),
    [
        (404, "application/xml", b"<?xml version='1.0'?><Error><Code>NoSuchBucket</Code></Error>"),
        (200, "text/html", b"<html><body>Welcome to nginx!</body></html>"),
    ],
)
def test_a_url_that_is_not_the_api_is_named_in_one_line_without_its_body(
    status: int, content_type: str, body: bytes, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    transport = httpx.MockTransport(lambda r: httpx.Response(status, content=body, headers={"content-type": content_type}))
    monkeypatch.setattr(client, "connect", lambda args: client.Client("https://example.com/v1", transport=transport))
    assert main(["status"]) == client.EXIT_UNREACHABLE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "<" not in err
    assert f"https://example.com/v1 is not the servingctl API: it answered HTTP {status}" in err
    assert f"with {content_type}, not JSON (check --api-url" in err


def test_the_demo_leaves_the_width_to_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from servingctl_twin import demo

    source = Path(demo.__file__).read_text()
    assert '"140"' not in source  # the demo's tables follow $COLUMNS or 80, as every command's do
