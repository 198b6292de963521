"""The figures every output shares (markdown, terminal, charts, JSON): one headline row per scenario
in the reference's columns, the side-by-side of two runs with the change in percent, and the cost
comparison of each scenario's measured throughput."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from servingctl.schema.results import RunResult, ScenarioSummary
from servingctl.costs import CompareInput, Comparison, compare
from servingctl.costs.compare import HOURS_PER_MONTH


@dataclass(frozen=True)
class ScenarioRow:
    """One scenario's headline figures (medians over successful measured requests)."""

    name: str
    input_tokens: int
    concurrency: int
    mode: str
    input_tokens_target: int  # asked for; input_tokens is what calibration measured after the chat template
    ttft_samples: int  # how many requests the TTFT percentiles come from
    aggregate_tok_s: float | None
    e2e_tok_s: float | None
    ttft_median_ms: float | None
    ttft_p90_ms: float | None
    ttft_p99_ms: float | None
    decode_tok_s: float | None
    requests: int
    ok: int
    failed: int
    client_bound: bool

    def as_dict(self) -> dict:
        """Plain dict for JSON output."""
        return asdict(self)


def scenario_row(summary: ScenarioSummary) -> ScenarioRow:
    """The headline row of one scenario summary."""
    return ScenarioRow(
        name=summary.name,
        input_tokens=summary.input_tokens,
        concurrency=summary.concurrency,
        mode=summary.mode,
        input_tokens_target=summary.input_tokens_target,
        ttft_samples=summary.ttft_ms.count,
        aggregate_tok_s=summary.aggregate_tok_s,
        e2e_tok_s=summary.e2e_tok_s.median,
        ttft_median_ms=summary.ttft_ms.median,
        ttft_p90_ms=summary.ttft_ms.p90,
        ttft_p99_ms=summary.ttft_ms.p99,
        decode_tok_s=summary.decode_tok_s.median,
        requests=summary.requests,
        ok=summary.ok,
        failed=summary.failed,
        client_bound=summary.client_bound,
    )


def scenario_rows(run: RunResult) -> list[ScenarioRow]:
    """Rows of every scenario, ordered by input length then concurrency (the reference's order)."""
    rows = [scenario_row(s.summary) for s in run.scenarios]
    return sorted(rows, key=lambda r: (r.input_tokens, r.concurrency, r.name))


# Figures compared between two runs: (attribute, label, True when higher is better).
COMPARED: tuple[tuple[str, str, bool], ...] = (
    ("aggregate_tok_s", "aggregate tok/s", True),
    ("e2e_tok_s", "E2E tok/s per request", True),
    ("ttft_median_ms", "median TTFT ms", False),
    ("ttft_p99_ms", "p99 TTFT ms", False),
    ("decode_tok_s", "decode tok/s", True),
)


@dataclass(frozen=True)
class ComparedFigure:
    """One figure of one scenario in both runs; change_pct = (run - baseline) / baseline x 100."""

    metric: str
    label: str
    baseline: float | None
    run: float | None
    change_pct: float | None
    higher_is_better: bool


@dataclass(frozen=True)
class ComparedScenario:
    """One scenario name matched across a baseline and a run (either side may lack it)."""

    name: str
    input_tokens: int
    concurrency: int
    figures: list[ComparedFigure]
    in_baseline: bool
    in_run: bool
    client_bound: bool

    def as_dict(self) -> dict:
        """Plain dict for JSON output."""
        return asdict(self)


def change_pct(baseline: float | None, value: float | None) -> float | None:
    """Relative change from baseline to value in percent (None when either is missing or baseline 0)."""
    if baseline is None or value is None or baseline == 0:
        return None
    return (value - baseline) / baseline * 100.0


def compare_runs(baseline: RunResult, run: RunResult) -> list[ComparedScenario]:
    """Match scenarios by name and put each compared figure of both runs side by side."""
    base_rows = {r.name: r for r in scenario_rows(baseline)}
    run_rows = {r.name: r for r in scenario_rows(run)}
    names = sorted(
        base_rows.keys() | run_rows.keys(),
        key=lambda n: ((run_rows.get(n) or base_rows[n]).input_tokens, (run_rows.get(n) or base_rows[n]).concurrency, n),
    )
    compared = []
    for name in names:
        base, this = base_rows.get(name), run_rows.get(name)
        shape = this or base
        assert shape is not None
        figures = []
        for attr, label, higher in COMPARED:
            b = getattr(base, attr) if base else None
            r = getattr(this, attr) if this else None
            figures.append(ComparedFigure(attr, label, b, r, change_pct(b, r), higher))
        compared.append(
            ComparedScenario(
                name=name,
                input_tokens=shape.input_tokens,
                concurrency=shape.concurrency,
                figures=figures,
                in_baseline=base is not None,
                in_run=this is not None,
                client_bound=bool((base and base.client_bound) or (this and this.client_bound)),
            )
        )
    return compared


def cost_comparisons(
    run: RunResult,
    *,
    api_input_usd_per_m: float,
    api_output_usd_per_m: float,
    self_hosted_monthly_usd: float | None = None,
    hourly_usd: float | None = None,
    hours: float = HOURS_PER_MONTH,
) -> dict[str, Comparison]:
    """Self-hosted vs managed API for every scenario with a measured aggregate (keyed by scenario name):
    that aggregate sustained for `hours`, each request the scenario's input tokens and max_tokens out."""
    comparisons = {}
    for scenario in run.scenarios:
        summary = scenario.summary
        if not summary.aggregate_tok_s:
            continue
        comparisons[summary.name] = compare(
            CompareInput(
                aggregate_tok_s=summary.aggregate_tok_s,
                input_tokens=summary.input_tokens,
                output_tokens=summary.max_tokens,
                api_input_usd_per_m=api_input_usd_per_m,
                api_output_usd_per_m=api_output_usd_per_m,
                hours=hours,
                self_hosted_monthly_usd=self_hosted_monthly_usd,
                hourly_usd=hourly_usd,
            )
        )
    return comparisons
