"""Each function's settings, read from its environment variables once, at cold start (module import),
as Lambda sets them before it imports the handler: one model per function, a variable missing or
malformed failing with its name. The one place the product reads os.environ."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from servingctl.shared.flow_inputs import Poll


class SettingsError(RuntimeError):
    """An environment variable a function needs is missing or malformed (the Init phase fails)."""


class _Settings(BaseModel):
    """Fields are named in Python, aliased to their environment variables; unknown variables are the
    runtime's and ignored."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Self:
        """The settings from env (default: this process's environment); SettingsError names each bad variable."""
        source = dict(os.environ if env is None else env)
        try:
            return cls.model_validate(source)
        except ValidationError as exc:
            problems = [
                f"{'.'.join(str(p) for p in err['loc'])}: {'not set' if err['type'] == 'missing' else err['msg']}"
                for err in exc.errors()
            ]
            raise SettingsError(f"{cls.__name__}: " + "; ".join(problems)) from None


class _Controller(_Settings):
    """What every function that reads the registry and the state table gets (template.yaml's Globals)."""

    registry: str = Field(min_length=1, alias="SERVINGCTL_REGISTRY", description="ssm:<path> or a registry file")
    table: str = Field(min_length=1, alias="SERVINGCTL_TABLE")
    # Lambda sets AWS_REGION (an ECS task AWS_DEFAULT_REGION too); the region of a registry whose
    # index cannot be read.
    region: str = Field(min_length=1, alias="AWS_REGION")

    @model_validator(mode="before")
    @classmethod
    def _default_region(cls, data: Any) -> Any:
        """AWS_DEFAULT_REGION when AWS_REGION is not set, as boto3 reads them."""
        if isinstance(data, dict) and not data.get("AWS_REGION") and data.get("AWS_DEFAULT_REGION"):
            return {**data, "AWS_REGION": data["AWS_DEFAULT_REGION"]}
        return data


class ProfileStepsSettings(_Controller):
    """functions/profile_steps."""


class ApiSettings(_Controller):
    """functions/api."""

    start_machine_arn: str = Field(min_length=1, alias="START_STATE_MACHINE_ARN")
    stop_machine_arn: str = Field(min_length=1, alias="STOP_STATE_MACHINE_ARN")
    bench_machine_arn: str = Field(default="", alias="RUN_BENCHMARK_STATE_MACHINE_ARN")
    records_bucket: str = Field(default="", alias="SERVINGCTL_BUCKET")
    bench_task_definition: str = Field(default="", alias="SERVINGCTL_BENCH_ECS_TASK_DEFINITION")


class SweepSettings(_Controller):
    """functions/sweep."""

    start_machine_arn: str = Field(min_length=1, alias="START_STATE_MACHINE_ARN")
    stop_machine_arn: str = Field(min_length=1, alias="STOP_STATE_MACHINE_ARN")
    bench_machine_arn: str = Field(default="", alias="RUN_BENCHMARK_STATE_MACHINE_ARN")
    metrics_namespace: str = Field(default="servingctl", min_length=1, alias="POWERTOOLS_METRICS_NAMESPACE")
    # The pacing of the stops it starts when the event gives none (the twin sets its scaled clock).
    stop_poll: Poll | None = Field(default=None, alias="SERVINGCTL_STOP_POLL")

    @field_validator("stop_poll", mode="before")
    @classmethod
    def _poll_json(cls, value: Any) -> Any:
        """JSON (then validated as a Poll, like an execution input's); unset or empty is None."""
        if isinstance(value, str):
            return json.loads(value) if value else None
        return value


class WakerSettings(_Controller):
    """The waker (functions/waker): it reads the store and starts start_profile."""

    start_machine_arn: str = Field(min_length=1, alias="START_STATE_MACHINE_ARN")
    stop_machine_arn: str = Field(min_length=1, alias="STOP_STATE_MACHINE_ARN")
    # The pacing of the starts it makes (the twin sets its scaled clock); unset: start_profile's defaults.
    start_poll: Poll | None = Field(default=None, alias="SERVINGCTL_START_POLL")

    @field_validator("start_poll", mode="before")
    @classmethod
    def _poll_json(cls, value: Any) -> Any:
        """JSON (then validated as a Poll, like an execution input's); unset or empty is None."""
        if isinstance(value, str):
            return json.loads(value) if value else None
        return value


class BenchWorkerSettings(_Controller):
    """functions/bench_worker, and the ECS benchmark task (servingctl.runs.worker.main)."""

    bucket: str = Field(min_length=1, alias="SERVINGCTL_BUCKET")
    # The role each step assumes, tagged with its run (servingctl.runs.scoped); unset: no scoping.
    run_role: str = Field(default="", alias="SERVINGCTL_BENCH_RUN_ROLE")
    # Where scenarios too long for Lambda run; all unset when the benchmark image is not deployed.
    ecs_task_definition: str = Field(default="", alias="SERVINGCTL_BENCH_ECS_TASK_DEFINITION")
    ecs_cluster: str = Field(default="", alias="SERVINGCTL_BENCH_ECS_CLUSTER")
    ecs_subnets: str = Field(default="", alias="SERVINGCTL_BENCH_ECS_SUBNETS", description="comma-separated")
    ecs_security_groups: str = Field(default="", alias="SERVINGCTL_BENCH_ECS_SECURITY_GROUPS", description="comma-separated")


class BenchTaskSettings(BenchWorkerSettings):
    """The ECS benchmark task: the worker's settings and the one event it runs."""

    event: str = Field(min_length=1, alias="SERVINGCTL_BENCH_EVENT", description="the run_scenario event, JSON")
