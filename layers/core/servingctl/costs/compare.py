"""Self-hosted vs managed API: what the same tokens cost each way, per month and per 1M tokens.

The model of the reference article: the measured aggregate throughput is sustained for `hours` a
month, every request has the same input and output length, and the managed API bills the same
input and output tokens at its per-1M prices.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

SECONDS_PER_HOUR = 3600
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


def compare(inputs: CompareInput) -> Comparison:
    """Compute the monthly costs both ways, their ratio, cost per 1M output tokens and break-even."""
    self_monthly = inputs.self_hosted_monthly_usd or inputs.hourly_usd * inputs.hours  # type: ignore[operator]
    output_tokens = inputs.aggregate_tok_s * inputs.hours * SECONDS_PER_HOUR
    requests = output_tokens / inputs.output_tokens
    input_tokens = requests * inputs.input_tokens
    api_monthly = (
        input_tokens / 1e6 * inputs.api_input_usd_per_m + output_tokens / 1e6 * inputs.api_output_usd_per_m
    )
    return Comparison(
        inputs=inputs,
        output_tokens_per_month=output_tokens,
        input_tokens_per_month=input_tokens,
        requests_per_month=requests,
        self_hosted_monthly_usd=self_monthly,
        api_monthly_usd=api_monthly,
        ratio_self_hosted_to_api=self_monthly / api_monthly if api_monthly else float("inf"),
        self_hosted_usd_per_m_output=self_monthly / (output_tokens / 1e6),
        api_usd_per_m_output=api_monthly / (output_tokens / 1e6),
        break_even_utilization=self_monthly / api_monthly if api_monthly else float("inf"),
    )
