"""What Ctrl-C says when it leaves work running: the line's parts, its fallbacks when the API does not
answer, and Ctrl-C while the request that starts something is on its way (the terminal test
drives the real follows)."""

from __future__ import annotations

from typing import Any

import pytest

from servingctl_cli import client
from servingctl_cli.interrupt import interrupted_line
from servingctl_cli.main import main

PROFILE = "deepseek-v4-flash"
ARN = "arn:aws:states:us-east-1:123456789012:execution:servingctl-start-profile:start-deepseek-v4-flash-abc"
LISTED = {"phase": "READY", "pool": "p", "model": "m", "endpoint_url": "http://alb", "routing_header": "X-LLM-Profile: p"}
# The API's answers as its models give them (the CLI reads them through those models).
PROFILES = [
    LISTED | {"name": PROFILE, "instance_type": "g7e.12xlarge", "hourly_usd": 12.17},
    LISTED | {"name": "nemotron-nano", "instance_type": "g7e.2xlarge", "hourly_usd": None},
]
PROGRESS = {"execution_id": "start-deepseek-v4-flash-abc", "action": "start", "profile": PROFILE, "status": "RUNNING"}
PROGRESS |= {"phase": "capacity", "phases": [], "started_at": "2026-12-03T09:00:00Z", "elapsed_s": 12.0}


class FakeApi:
    """Answers GET like the API; POST is interrupted; `down` makes every call fail as unreachable."""

    def __init__(self, down: bool = False) -> None:
        self.down = down
        self.local, self.poll = True, None

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        if self.down:
            raise client.Unreachable("cannot connect to http://127.0.0.1:1")
        if path == "/profiles":
            return PROFILES
        if path.startswith("/benchmarks/"):
            run = {"run_id": "R1", "profile": PROFILE, "status": "RUNNING", "execution_arn": "arn:...:bench-R1"}
            return run | {"request": {"profile": PROFILE, "stop": True}}
        return PROGRESS | {"execution_arn": ARN}

    def post(self, path: str, body: dict[str, Any] | None = None, *, idempotent: bool = False) -> Any:
        raise KeyboardInterrupt

    def close(self) -> None:
        """Nothing to close."""


def test_the_line_names_the_execution_the_instance_its_price_and_the_next_commands() -> None:
    line = interrupted_line(FakeApi(), "start", "start-deepseek-v4-flash-abc", PROFILE)  # type: ignore[arg-type]
    assert line == (
        f"interrupted: start of {PROFILE} not followed any more; it keeps running in Step Functions ({ARN}) and "
        f"brings up a g7e.12xlarge (12.17 USD/h); re-attach: servingctl wait start-deepseek-v4-flash-abc; "
        f"stop it: servingctl stop {PROFILE}"
    )
    run = interrupted_line(FakeApi(), "bench", "R1", PROFILE)  # type: ignore[arg-type]
    assert "(arn:...:bench-R1) on deepseek-v4-flash, a g7e.12xlarge (12.17 USD/h), which the run stops when it ends" in run
    unpriced = interrupted_line(FakeApi(), "stop", "stop-nemotron-nano-abc", "nemotron-nano")  # type: ignore[arg-type]
    assert (
        "releases a g7e.2xlarge (not in the price catalog); re-attach: servingctl wait stop-nemotron-nano-abc; "
        "check: servingctl status nemotron-nano" in unpriced
    )


def test_an_answer_the_cli_cannot_read_leaves_the_line_its_fallbacks() -> None:
    class OldApi(FakeApi):
        def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
            return [{"name": PROFILE}] if path == "/profiles" else {"execution_arn": ARN}  # fields missing

    line = interrupted_line(OldApi(), "start", "start-x", PROFILE)  # type: ignore[arg-type]
    assert "Step Functions (start-x) and brings up its GPU instance; re-attach: servingctl wait start-x" in line


def test_without_an_answering_api_the_line_still_says_what_goes_on_and_the_commands() -> None:
    line = interrupted_line(FakeApi(down=True), "start", "start-x", PROFILE)  # type: ignore[arg-type]
    assert line == (
        f"interrupted: start of {PROFILE} not followed any more; it keeps running in Step Functions (start-x) "
        f"and brings up its GPU instance; re-attach: servingctl wait start-x; stop it: servingctl stop {PROFILE}"
    )


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["start", PROFILE], f"the start of {PROFILE} may have been submitted; check: servingctl status {PROFILE}"),
        (["stop", PROFILE, "--wait"], f"the stop of {PROFILE} may have been submitted; check: servingctl status {PROFILE}"),
        (["bench", "--profile", PROFILE], f"of {PROFILE} may have been submitted; check: servingctl wait "),
    ],
)
def test_ctrl_c_before_the_api_answered_says_it_may_have_started(
    argv: list[str], said: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(client, "connect", lambda args: FakeApi())
    assert main(argv) == client.EXIT_INTERRUPTED
    err = capsys.readouterr().err
    assert err.startswith("interrupted before the API answered: ") and said in err and "Traceback" not in err, err
