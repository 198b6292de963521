"""`servingctl status NAME` as a person reads it: the sweep's next stop, its warning, the hold of
a benchmark run and who started the profile, from the API's own answer model."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from servingctl.api.models import ProfileDetail
from servingctl_cli.profiles import status_text

NOW = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


def _detail(**changes: Any) -> ProfileDetail:
    """A READY profile's GET /profiles/{name} answer, as the CLI reads it (through JSON, as it comes)."""
    return ProfileDetail.model_validate_json(
        ProfileDetail(
            name="deepseek-v4-flash",
            phase="READY",
            pool="g7e-4gpu",
            instance_type="g7e.12xlarge",
            model="deepseek-v4-flash",
            ready_at=NOW,
            lease_deadline=datetime(2026, 12, 3, 11, 0, tzinfo=UTC),
            endpoint_url="http://internal-alb",
            routing_header="X-LLM-Profile: deepseek-v4-flash",
            desired_count=1,
            running_count=1,
            pending_count=0,
            instances=[],
            target_health={},
            service_events=[],
            **changes,
        ).model_dump_json()
    )


def test_a_near_lease_stop_is_flagged_with_the_command_that_extends_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    stop = {"reason": "lease-expired", "at": "2026-12-03T11:00:00Z", "hard": False, "detail": "lease ends"}
    text = status_text(_detail(next_stop=stop, stopping_soon=True), local=True)
    assert max(len(line) for line in text.splitlines()) <= 80
    words = " ".join(text.split())  # wrapped at 80 columns
    assert "next stop STOPPING SOON: 2026-12-03 11:00 UTC (lease-expired: lease ends; waits for running requests)" in words
    assert "`servingctl keepalive deepseek-v4-flash` extends the lease" in words


def test_a_far_hard_stop_is_not_flagged_and_names_its_drain() -> None:
    stop = {
        "reason": "outside-schedule",
        "at": "2026-12-03T18:00:00Z",
        "hard": True,
        "detail": "weekdays 08:00-18:00 Europe/Paris",
    }
    text = status_text(_detail(next_stop=stop), local=True)
    assert "next stop" in text and "hard limit, after a drain" in text
    assert "STOPPING SOON" not in text and "keepalive" not in text  # a keepalive does not move a schedule


def test_a_hold_and_the_starter_are_shown_and_a_plain_profile_has_neither() -> None:
    held = status_text(
        _detail(
            held_by="run-42", held_until=datetime(2026, 12, 3, 9, 30, tzinfo=UTC), started_by="arn:aws:iam::123456789012:user/ana"
        ),
        local=True,
    )
    assert "benchmark run run-42 until 2026-12-03 09:30 UTC" in held
    assert "arn:aws:iam::123456789012:user/ana" in held
    plain = status_text(_detail(), local=True)
    assert not any(word in plain for word in ("next stop", "held by", "started by"))


def test_status_shows_the_warm_pool_the_last_start_and_a_capacity_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    text = status_text(
        _detail(
            warm_instances=[{"instance_id": "i-0abc", "lifecycle": "Warmed:Stopped", "protected": False}],
            warm_start=True,
            capacity_note="g7e.2xlarge: InsufficientInstanceCapacity; moved to g7e.4xlarge (option 2 of 3)",
        )
    )
    assert "i-0abc Warmed:Stopped" in text and "(stopped: only the volume is billed)" in text
    assert "warm (an instance from the warm pool)" in text
    assert "moved to g7e.4xlarge (option 2 of 3)" in text
    plain = status_text(_detail())
    assert "warm pool" not in plain and "last start" not in plain and "capacity" not in plain
