"""The cost comparison as a document: what it was given (CompareInput) and the figures it gives
(Comparison), self-hosted vs managed API; computed by servingctl.costs.compare, stored with a
benchmark run, rendered by the benchmark outputs."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

HOURS_PER_MONTH = 730


class CompareInput(BaseModel):
    """What the comparison needs; exactly one of self_hosted_monthly_usd and hourly_usd."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    aggregate_tok_s: float = Field(gt=0, description="measured aggregate output tokens per second")
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
            return (f"self-hosting is cheaper once more than {self.break_even_utilization:.0%} of the measured throughput "
                    f"is used during the {self.inputs.hours:g} running hours")
        return (f"the managed API stays cheaper at any utilization; self-hosting would win if the API cost more than "
                f"{self.self_hosted_usd_per_m_output:,.2f} USD per 1M output tokens for these requests (now "
                f"{self.api_usd_per_m_output:,.2f}), or if the server sustained more than "
                f"{self.inputs.aggregate_tok_s * self.break_even_utilization:,.0f} output tok/s "
                f"(measured {self.inputs.aggregate_tok_s:,.0f})")
