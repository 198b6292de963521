"""Results schema: secrets never stored, mode requirements named, names stable, JSON round trip."""

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from servingctl.schema.results import SCHEMA_VERSION, RunConfig, RunMetadata, RunResult, scenario_name


def test_secret_headers_are_redacted_and_routing_header_kept():
    config = RunConfig(endpoint="http://alb", model="m", headers={"Authorization": "Bearer sk-1", "X-LLM-Profile": "ds"})
    dumped = config.model_dump_json()
    assert "sk-1" not in dumped
    assert config.headers == {"Authorization": "<redacted>", "X-LLM-Profile": "ds"}


def test_rate_mode_without_rate_is_rejected_naming_it():
    with pytest.raises(ValidationError, match="rate"):
        RunConfig(endpoint="http://alb", model="m", mode="rate", requests=10)


def test_unknown_salt_mode_lists_allowed_values():
    with pytest.raises(ValidationError, match=r"cache-salt.*prompt-nonce.*none"):
        RunConfig(endpoint="http://alb", model="m", salt_mode="random")


def test_scenario_names():
    assert scenario_name(256, 4) == "in256-c4"
    assert scenario_name(2048, 2, "sustained") == "in2048-c2-sustained"
    assert scenario_name(8192, 8, "rate", 2.5) == "in8192-c8-rate2.5"


def test_run_result_round_trips_through_json():
    run = RunResult(
        config=RunConfig(endpoint="http://alb", model="m"),
        metadata=RunMetadata(run_id="r1", client_version="0.1.0", python_version="3.12.1", started_at=datetime.now(UTC)),
        failed_scenarios=["in256-c1"],
    )
    again = RunResult.model_validate_json(run.model_dump_json())
    assert again == run
    assert again.schema_version == SCHEMA_VERSION
    assert again.exit_code == 1


def test_warmup_by_time_is_bounded_and_excludes_warmup_rounds():
    base = {"endpoint": "http://alb", "model": "m", "warmup": 0}
    assert RunConfig.model_validate(base | {"warmup_s": 3600}).warmup_label() == "3600s"  # the limit
    with pytest.raises(ValidationError, match="warmup_s"):
        RunConfig.model_validate(base | {"warmup_s": 3601})  # one past it
    with pytest.raises(ValidationError, match="warmup_s"):
        RunConfig.model_validate(base | {"warmup_s": 0})
    with pytest.raises(ValidationError, match="warmup, warmup_s: warm-up by rounds or by time, not both"):
        RunConfig.model_validate(base | {"warmup": 2, "warmup_s": 30})
    # a config stored before warm-up by time: rounds, as it was
    old = RunConfig.model_validate_json('{"endpoint": "http://alb", "model": "m", "warmup": 3}')
    assert (old.warmup, old.warmup_s, old.warmup_label()) == (3, None, "3")
