"""Self-hosted vs managed API: what the same tokens cost each way, per month and per 1M tokens.

The model of the reference article: the measured output tok/s is sustained for `hours` a
month (plus what stands all month, e.g. the volumes of warm instances), every request has the same input and
output length, and the managed API bills the same
input and output tokens at its per-1M prices. cost_comparisons prices every scenario of a run.
"""

from __future__ import annotations

from servingctl.schema.comparison import HOURS_PER_MONTH, CompareInput, Comparison, DayUse, SloCost, SloCostInput
from servingctl.schema.results import RunResult, ScenarioSummary

SECONDS_PER_HOUR = 3600


def compare(inputs: CompareInput) -> Comparison:
    """Compute the monthly costs both ways, their ratio, cost per 1M output tokens and break-even."""
    running = inputs.self_hosted_monthly_usd
    if running is None:
        assert inputs.hourly_usd is not None  # CompareInput holds exactly one of the two
        running = inputs.hourly_usd * inputs.hours
    self_monthly = running + inputs.standing_monthly_usd
    output_tokens = inputs.output_tok_s * inputs.hours * SECONDS_PER_HOUR
    requests = output_tokens / inputs.output_tokens
    input_tokens = requests * inputs.input_tokens
    api_monthly = input_tokens / 1e6 * inputs.api_input_usd_per_m + output_tokens / 1e6 * inputs.api_output_usd_per_m
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


def cost_comparisons(
    run: RunResult,
    *,
    api_input_usd_per_m: float,
    api_output_usd_per_m: float,
    self_hosted_monthly_usd: float | None = None,
    hourly_usd: float | None = None,
    hours: float = HOURS_PER_MONTH,
    standing_monthly_usd: float = 0.0,
) -> dict[str, Comparison]:
    """Self-hosted vs managed API for every scenario with a measured output tok/s (keyed by scenario name):
    that throughput sustained for `hours`, each request the scenario's input tokens and max_tokens out."""
    comparisons = {}
    for scenario in run.scenarios:
        summary = scenario.summary
        if not summary.output_tok_s:
            continue
        comparisons[summary.name] = compare(
            CompareInput(
                output_tok_s=summary.output_tok_s,
                input_tokens=summary.input_tokens,
                output_tokens=summary.max_tokens,
                api_input_usd_per_m=api_input_usd_per_m,
                api_output_usd_per_m=api_output_usd_per_m,
                hours=hours,
                self_hosted_monthly_usd=self_hosted_monthly_usd,
                hourly_usd=hourly_usd,
                standing_monthly_usd=standing_monthly_usd,
            )
        )
    return comparisons


def slo_cost(
    summary: ScenarioSummary,
    *,
    hourly_usd: float,
    api_input_usd_per_m: float,
    api_output_usd_per_m: float,
    day: DayUse,
) -> SloCost | None:
    """Cost per 1M output tokens at the SLO from a scenario's goodput (None without goodput)."""
    slo = summary.slo
    if slo is None or slo.goodput_rps <= 0 or slo.goodput_tok_s <= 0:
        return None
    inputs = SloCostInput(
        goodput_rps=slo.goodput_rps,
        goodput_tok_s=slo.goodput_tok_s,
        input_tokens=summary.input_tokens,
        hourly_usd=hourly_usd,
        api_input_usd_per_m=api_input_usd_per_m,
        api_output_usd_per_m=api_output_usd_per_m,
    )
    return slo_cost_of(inputs, day, scenario=summary.name, concurrency=summary.concurrency)


def slo_cost_of(inputs: SloCostInput, day: DayUse, *, scenario: str | None = None, concurrency: int | None = None) -> SloCost:
    """The day's instance cost over what the goodput serves in its serving hours, against the API."""
    output_tokens = inputs.goodput_tok_s / inputs.goodput_rps
    daily = inputs.hourly_usd * day.running_hours
    serving_s = day.serving_hours * SECONDS_PER_HOUR
    api_per_request = (inputs.input_tokens * inputs.api_input_usd_per_m + output_tokens * inputs.api_output_usd_per_m) / 1e6
    return SloCost(
        scenario=scenario,
        concurrency=concurrency,
        goodput_rps=inputs.goodput_rps,
        goodput_tok_s=inputs.goodput_tok_s,
        input_tokens=inputs.input_tokens,
        output_tokens=output_tokens,
        hourly_usd=inputs.hourly_usd,
        api_input_usd_per_m=inputs.api_input_usd_per_m,
        api_output_usd_per_m=inputs.api_output_usd_per_m,
        day=day,
        daily_usd=daily,
        capacity_requests_per_day=inputs.goodput_rps * serving_s,
        self_hosted_usd_per_m_output=daily / (inputs.goodput_tok_s * serving_s / 1e6) if serving_s > 0 else None,
        api_usd_per_m_output=api_per_request / output_tokens * 1e6,
        api_usd_per_request=api_per_request,
        break_even_requests_per_day=daily / api_per_request if api_per_request > 0 else None,
    )
