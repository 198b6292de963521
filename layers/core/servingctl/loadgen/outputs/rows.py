"""The figures every output shares (markdown, terminal, charts, JSON): one headline row per scenario
in the reference's columns and the side-by-side of two runs: the change in percent with its
bootstrap confidence interval (bench.bootstrap) and a verdict, resampling the per-request records
(output tok/s: the burst rounds, or ten equal slices of the steady window)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from servingctl.loadgen import bootstrap
from servingctl.loadgen.metrics import itl_samples_ms
from servingctl.loadgen.stats import resolved
from servingctl.schema.results import RequestRecord, RunResult, ScenarioResult, ScenarioSummary


@dataclass(frozen=True)
class ScenarioRow:
    """One scenario's headline figures (medians over successful measured requests)."""

    name: str
    input_tokens: int
    concurrency: int
    mode: str
    input_tokens_target: int  # asked for; input_tokens is what calibration measured after the chat template
    ttft_samples: int  # how many requests the TTFT percentiles come from
    output_tok_s: float | None
    e2e_tok_s: float | None
    ttft_median_ms: float | None
    ttft_p90_ms: float | None  # None where ttft_samples do not resolve it (bench.stats.min_samples)
    ttft_p99_ms: float | None
    decode_tok_s: float | None
    itl_median_ms: float | None
    e2e_median_ms: float | None
    requests: int
    ok: int
    failed: int
    client_bound: bool
    host_busy: bool  # the machine, not the client, made the timestamps late

    def as_dict(self) -> dict[str, Any]:
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
        output_tok_s=summary.output_tok_s,
        e2e_tok_s=summary.e2e_tok_s.median,
        ttft_median_ms=summary.ttft_ms.median,
        ttft_p90_ms=resolved(summary.ttft_ms.p90, summary.ttft_ms.count, 0.90),
        ttft_p99_ms=resolved(summary.ttft_ms.p99, summary.ttft_ms.count, 0.99),
        decode_tok_s=summary.decode_tok_s.median,
        itl_median_ms=summary.itl_ms.median,
        e2e_median_ms=summary.e2e_ms.median,
        requests=summary.requests,
        ok=summary.ok,
        failed=summary.failed,
        client_bound=summary.client_bound,
        host_busy=summary.client.host_busy,
    )


def scenario_rows(run: RunResult) -> list[ScenarioRow]:
    """Rows of every scenario, ordered by input length then concurrency (the reference's order)."""
    rows = [scenario_row(s.summary) for s in run.scenarios]
    return sorted(rows, key=lambda r: (r.input_tokens, r.concurrency, r.name))


Units = list[list[float]]
# Slices of a steady window resampled for its throughput (sustained and rate modes).
WINDOW_SLICES = 10


def _measured(scenario: ScenarioResult) -> list[RequestRecord]:
    return [r for r in scenario.records if r.ok and not r.warmup]


def _per_request(attribute: str) -> Callable[[ScenarioResult], Units]:
    """One unit per successful measured request: its value of `attribute` (when it has one)."""
    return lambda scenario: [[v] for r in _measured(scenario) if (v := getattr(r, attribute)) is not None]


def _itl(scenario: ScenarioResult) -> Units:
    """One unit per request: its token-normalized gaps (a request's tokens are resampled together)."""
    return [itl_samples_ms(r.chunks) for r in _measured(scenario)]


def _output(scenario: ScenarioResult) -> Units:
    """Burst: each measured round's output tok/s; otherwise the steady window's equal slices' tok/s."""
    if scenario.summary.mode == "burst":
        return [[r.output_tok_s] for r in scenario.rounds if not r.warmup and r.output_tok_s is not None]
    window = scenario.summary.steady_window
    if window is None or window.t_end_ns <= window.t_start_ns:
        return []
    size = (window.t_end_ns - window.t_start_ns) / WINDOW_SLICES
    tokens = [0] * WINDOW_SLICES
    for r in _measured(scenario):
        for t, n in r.chunks:
            if window.t_start_ns <= t <= window.t_end_ns:
                tokens[min(int((t - window.t_start_ns) / size), WINDOW_SLICES - 1)] += n
    return [[n / (size / 1e9)] for n in tokens]


@dataclass(frozen=True)
class Compared:
    """A figure compared between runs: row attribute, label, direction, what is resampled, its unit's name."""

    metric: str
    label: str
    higher_is_better: bool
    units: Callable[[ScenarioResult], Units]
    unit: str
    kind: bootstrap.Statistic = "median"  # a steady window's slices: their mean (see _figure)


# Figures compared between two runs (the statistic matches the headline: medians; a steady
# window's throughput is its mean).
COMPARED: tuple[Compared, ...] = (
    Compared("output_tok_s", "output tok/s", True, _output, "rounds"),
    Compared("ttft_median_ms", "TTFT ms", False, _per_request("ttft_ms"), "requests"),
    Compared("itl_median_ms", "ITL ms", False, _itl, "requests"),
    Compared("e2e_median_ms", "E2E ms", False, _per_request("e2e_ms"), "requests"),
    Compared("decode_tok_s", "decode tok/s", True, _per_request("decode_tok_s"), "requests"),
)


@dataclass(frozen=True)
class ComparedFigure:
    """One figure of one scenario in both runs; change_pct = (run - baseline) / baseline x 100 and,
    when both sides have enough units, its interval [low_pct, high_pct] and the verdict."""

    metric: str
    label: str
    baseline: float | None
    run: float | None
    change_pct: float | None
    higher_is_better: bool
    low_pct: float | None = None
    high_pct: float | None = None
    verdict: bootstrap.Verdict = "too few"
    units: tuple[int, int] = (0, 0)
    unit: str = "requests"


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
    confidence: float = field(default=bootstrap.CONFIDENCE)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output."""
        return asdict(self)


def change_pct(baseline: float | None, value: float | None) -> float | None:
    """Relative change from baseline to value in percent (None when either is missing or baseline 0)."""
    if baseline is None or value is None or baseline == 0:
        return None
    return (value - baseline) / baseline * 100.0


def _figure(
    c: Compared,
    name: str,
    base: ScenarioRow | None,
    this: ScenarioRow | None,
    base_sc: ScenarioResult | None,
    run_sc: ScenarioResult | None,
) -> ComparedFigure:
    """Both headline values and, when both runs have the scenario, the bootstrap interval."""
    b = getattr(base, c.metric) if base else None
    r = getattr(this, c.metric) if this else None
    shown = this or base
    mode = shown.mode if shown else "burst"
    unit = "windows" if c.unit == "rounds" and mode != "burst" else c.unit
    kind: bootstrap.Statistic = "mean" if unit == "windows" else c.kind
    if base_sc is None or run_sc is None:
        return ComparedFigure(c.metric, c.label, b, r, change_pct(b, r), c.higher_is_better, unit=unit)
    change = bootstrap.compare(
        c.units(base_sc), c.units(run_sc), higher_is_better=c.higher_is_better, seed=bootstrap.seed_for(name, c.metric), kind=kind
    )
    return ComparedFigure(
        c.metric,
        c.label,
        b,
        r,
        change_pct(b, r),
        c.higher_is_better,
        change.low_pct,
        change.high_pct,
        change.verdict,
        change.units,
        unit,
    )


def compare_runs(baseline: RunResult, run: RunResult) -> list[ComparedScenario]:
    """Match scenarios by name and put each compared figure of both runs side by side, with its interval."""
    base_rows = {r.name: r for r in scenario_rows(baseline)}
    run_rows = {r.name: r for r in scenario_rows(run)}
    base_scenarios = {s.summary.name: s for s in baseline.scenarios}
    run_scenarios = {s.summary.name: s for s in run.scenarios}
    names = sorted(
        base_rows.keys() | run_rows.keys(),
        key=lambda n: ((run_rows.get(n) or base_rows[n]).input_tokens, (run_rows.get(n) or base_rows[n]).concurrency, n),
    )
    compared = []
    for name in names:
        base, this = base_rows.get(name), run_rows.get(name)
        shape = this or base
        assert shape is not None
        figures = [_figure(c, name, base, this, base_scenarios.get(name), run_scenarios.get(name)) for c in COMPARED]
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
