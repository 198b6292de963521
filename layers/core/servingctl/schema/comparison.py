"""The cost comparison as a document: what it was given (CompareInput) and the figures it gives
(Comparison), self-hosted vs managed API; computed by servingctl.costs.compare, stored with a
benchmark run, rendered by the benchmark outputs."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from servingctl.schema.renamed import under_new_names

HOURS_PER_MONTH = 730


class CompareInput(BaseModel):
    """What the comparison needs; exactly one of self_hosted_monthly_usd and hourly_usd."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    output_tok_s: float = Field(gt=0, description="measured output tokens per second (a scenario's output_tok_s)")
    input_tokens: int = Field(ge=0, description="input tokens per request")
    output_tokens: int = Field(gt=0, description="output tokens per request")
    api_input_usd_per_m: float = Field(ge=0)
    api_output_usd_per_m: float = Field(ge=0)
    hours: float = Field(default=HOURS_PER_MONTH, gt=0, le=744, description="hours a month the server runs")
    self_hosted_monthly_usd: float | None = Field(default=None, gt=0)
    hourly_usd: float | None = Field(default=None, gt=0, description="all-in self-hosted cost per running hour")
    standing_monthly_usd: float = Field(
        default=0.0, ge=0, description="self-hosted costs that run whether or not the server does: warm instances' volumes"
    )

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data: Any) -> Any:
        # Stored as aggregate_tok_s before: those comparisons still load.
        return under_new_names(data, {"aggregate_tok_s": "output_tok_s"})

    @model_validator(mode="after")
    def _one_self_hosted_price(self) -> CompareInput:
        if (self.self_hosted_monthly_usd is None) == (self.hourly_usd is None):
            raise ValueError("give exactly one of self_hosted_monthly_usd and hourly_usd")
        return self


class Comparison(BaseModel):
    """The comparison's figures; ratio > 1 means self-hosting costs more than the managed API."""

    model_config = ConfigDict(frozen=True)

    inputs: CompareInput
    output_tokens_per_month: float
    input_tokens_per_month: float
    requests_per_month: float
    self_hosted_monthly_usd: float
    api_monthly_usd: float
    ratio_self_hosted_to_api: float
    self_hosted_usd_per_m_output: float
    api_usd_per_m_output: float = Field(description="API cost of the same requests per 1M output tokens")
    break_even_utilization: float = Field(
        description="share of the measured throughput that must be used during the running hours for "
        "self-hosting to cost what the API would; above 1.0 it never breaks even"
    )

    @property
    def breaks_even(self) -> bool:
        """True when some utilization up to 100 % makes self-hosting as cheap as the API."""
        return self.break_even_utilization <= 1.0

    def break_even_words(self) -> str:
        """The break-even in words: the utilization at which self-hosting gets cheaper, or that the
        managed API stays cheaper at any utilization and at which API price or throughput that flips."""
        if self.breaks_even:
            return (
                f"self-hosting is cheaper once more than {self.break_even_utilization:.0%} of the measured throughput "
                f"is used during the {self.inputs.hours:g} running hours"
            )
        return (
            f"the managed API stays cheaper at any utilization; self-hosting would win if the API cost more than "
            f"{self.self_hosted_usd_per_m_output:,.2f} USD per 1M output tokens for these requests (now "
            f"{self.api_usd_per_m_output:,.2f}), or if the server sustained more than "
            f"{self.inputs.output_tok_s * self.break_even_utilization:,.0f} output tok/s "
            f"(measured {self.inputs.output_tok_s:,.0f})"
        )


class DayUse(BaseModel):
    """A day of the profile's instance time, from its ledger and start history (or assumed when the
    history covers less than a day): hours running, how many starts, each start's cold start and
    the idle window an idle stop waits before it stops."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    running_hours: float = Field(gt=0, le=24, description="instance hours a day (cold starts and idle included)")
    starts: float = Field(ge=0, description="starts a day")
    cold_start_s: float = Field(ge=0, description="mean seconds from a start's request to READY")
    idle_minutes: float = Field(ge=0, description="idle window paid before each idle stop (0: no idle stop)")
    source: str = Field(description="where the figures come from, in words")

    @property
    def overhead_hours(self) -> float:
        """Hours a day the instance is paid but serves nothing: cold starts and idle windows."""
        return self.starts * (self.cold_start_s / 3600 + self.idle_minutes / 60)

    @property
    def serving_hours(self) -> float:
        """Hours a day the profile can serve (never below 0)."""
        return max(0.0, self.running_hours - self.overhead_hours)


class SloCostInput(BaseModel):
    """What the cost at the SLO needs besides the day: the goodput, the request's input and the prices."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    goodput_rps: float = Field(gt=0, description="requests/s meeting the SLOs")
    goodput_tok_s: float = Field(gt=0, description="their output tokens/s")
    input_tokens: int = Field(ge=0, description="input tokens per request")
    hourly_usd: float = Field(gt=0, description="all-in self-hosted cost per running hour")
    api_input_usd_per_m: float = Field(ge=0)
    api_output_usd_per_m: float = Field(ge=0)


class SloCost(BaseModel):
    """Cost per 1M output tokens at the SLO: the day's instance cost over what the profile serves at
    its goodput (not its raw throughput) in the day's serving hours, next to the managed API's price
    for the same requests, and the requests a day from which self-hosting is cheaper."""

    model_config = ConfigDict(frozen=True)

    scenario: str | None = Field(description="the scenario at the SLO (None: figures given by hand)")
    concurrency: int | None
    goodput_rps: float
    goodput_tok_s: float
    input_tokens: int
    output_tokens: float = Field(description="output tokens per good request")
    hourly_usd: float
    api_input_usd_per_m: float
    api_output_usd_per_m: float
    day: DayUse
    daily_usd: float
    capacity_requests_per_day: float = Field(description="good requests the serving hours hold at the SLO")
    self_hosted_usd_per_m_output: float | None = Field(description="at full use of the serving hours (None: no serving hours)")
    api_usd_per_m_output: float
    api_usd_per_request: float
    break_even_requests_per_day: float | None = Field(description="requests a day whose API bill equals the day's cost")

    @property
    def breaks_even(self) -> bool:
        """True when the profile can serve, within the SLO, the requests a day that make it cheaper."""
        return self.break_even_requests_per_day is not None and self.break_even_requests_per_day <= self.capacity_requests_per_day

    def words(self) -> str:
        """The cost at the SLO and the break-even line, in words."""
        per_m = "-" if self.self_hosted_usd_per_m_output is None else f"{self.self_hosted_usd_per_m_output:,.2f}"
        at = f"{self.scenario} (concurrency {self.concurrency}, goodput " if self.scenario else "at a goodput of "
        head = (
            f"{at}{self.goodput_tok_s:,.1f} output tok/s{')' if self.scenario else ''}: "
            f"self-hosting costs {per_m} USD per 1M output tokens, the managed API {self.api_usd_per_m_output:,.2f} "
            f"({self.daily_usd:,.2f} USD a day for {self.day.running_hours:g} h, of which "
            f"{self.day.overhead_hours:.2f} h cold starts and idle windows; {self.day.source})"
        )
        if self.break_even_requests_per_day is None:
            return head + "; the managed API costs nothing for these requests: self-hosting never wins"
        need = f"{self.break_even_requests_per_day:,.0f} requests a day"
        if self.breaks_even:
            return head + (
                f"; self-hosting is cheaper from {need} (it serves up to "
                f"{self.capacity_requests_per_day:,.0f} a day within the SLO)"
            )
        return head + (
            f"; the managed API stays cheaper: self-hosting would need {need}, more than the "
            f"{self.capacity_requests_per_day:,.0f} it serves within the SLO in {self.day.serving_hours:.1f} h"
        )
