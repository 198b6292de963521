"""A run as CSV (one row a request, one row a scenario) and as one self-contained HTML page (its
tables, the prompts it sent and its PNG charts embedded as data URIs: readable offline, no fetches);
beside a baseline run, the page also holds the comparison (each figure's change with its bootstrap
interval and verdict) and both fingerprints."""

from __future__ import annotations

import base64
import csv
import html
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from servingctl.loadgen.outputs.capacity import throughput_words
from servingctl.loadgen.outputs.fingerprint import compare_fingerprints, fingerprint
from servingctl.loadgen.outputs.rows import compare_runs
from servingctl.schema.results import MetricSummary, RunResult

REQUESTS_CSV = "requests.csv"
SCENARIOS_CSV = "scenarios.csv"
REPORT_HTML = "report.html"

REQUEST_FIELDS = (
    "index",
    "warmup",
    "ok",
    "error_kind",
    "error",
    "http_status",
    "prompt_tokens",
    "completion_tokens",
    "finish_reason",
    "mismatches",
    "ttfc_ms",
    "ttft_ms",
    "e2e_ms",
    "tpot_ms",
    "decode_tok_s",
    "t_start_ns",
    "t_end_ns",
)
# (column prefix, ScenarioSummary field) of the distributions written per scenario.
DISTRIBUTIONS = (
    ("ttft_ms", "ttft_ms"),
    ("ttfc_ms", "ttfc_ms"),
    ("e2e_ms", "e2e_ms"),
    ("itl_ms", "itl_ms"),
    ("tpot_ms", "tpot_ms"),
)
STATS = ("count", "median", "p90", "p99")


def request_rows(run: RunResult) -> list[dict[str, Any]]:
    """Every request of every scenario, warm-ups included (the warmup column says which)."""
    rows = []
    for scenario in run.scenarios:
        for record in scenario.records:
            row: dict[str, Any] = {"scenario": scenario.summary.name}
            for name in REQUEST_FIELDS:
                value = getattr(record, name)
                row[name] = ";".join(value) if name == "mismatches" else value
            rows.append(row)
    return rows


def scenario_rows(run: RunResult) -> list[dict[str, Any]]:
    """One row a scenario: identity, counts, throughput and the latency distributions' headline figures."""
    rows = []
    for scenario in run.scenarios:
        s = scenario.summary
        row: dict[str, Any] = {
            "scenario": s.name,
            "mode": s.mode,
            "concurrency": s.concurrency,
            "rate": s.rate,
            "input_tokens": s.input_tokens,
            "requests": s.requests,
            "ok": s.ok,
            "failed": s.failed,
            "output_tok_s": s.output_tok_s,
            "client_bound": s.client_bound,
        }
        for prefix, field in DISTRIBUTIONS:
            summary: MetricSummary = getattr(s, field)
            row |= {f"{prefix}_{stat}": getattr(summary, stat) for stat in STATS}
        rows.append(row)
    return rows


def to_csv(rows: Sequence[dict[str, Any]]) -> str:
    """Rows as CSV text with a header line (None written empty)."""
    out = io.StringIO()
    if rows:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: "" if v is None else v for k, v in row.items()} for row in rows)
    return out.getvalue()


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return html.escape(str(value))


def _table(rows: Sequence[dict[str, Any]]) -> str:
    if not rows:
        return "<p>none</p>"
    head = "".join(f"<th>{html.escape(k)}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row.values()) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def comparison_rows(baseline: RunResult, run: RunResult) -> list[dict[str, Any]]:
    """One row per scenario and compared figure: both medians, the change and its interval (%), the verdict."""
    rows: list[dict[str, Any]] = []
    for sc in compare_runs(baseline, run):
        if not (sc.in_baseline and sc.in_run):
            rows.append({"scenario": sc.name, "figure": f"only in {'the baseline' if sc.in_baseline else 'this run'}"})
            continue
        rows += [
            {
                "scenario": sc.name + (" (client-bound)" if sc.client_bound else ""),
                "figure": f.label,
                "baseline": f.baseline,
                "this run": f.run,
                "change %": f.change_pct,
                "interval low %": f.low_pct,
                "interval high %": f.high_pct,
                "verdict": f.verdict,
                "samples": f"{f.units[0]} vs {f.units[1]} {f.unit}",
            }
            for f in sc.figures
        ]
    return rows


def _comparison_html(baseline: RunResult, run: RunResult) -> str:
    rows = comparison_rows(baseline, run)
    # Rows of different shapes (a scenario on one side only) share the full header.
    header = max(rows, key=len).keys() if rows else []
    table = _table([{k: row.get(k) for k in header} for row in rows])
    prints = [
        {"field": r.field, "baseline": r.baseline, "this run": r.run, "differs": r.differs}
        for r in compare_fingerprints(baseline, run)
    ]
    return (
        f"<h2>Comparison with {html.escape(baseline.metadata.run_id)}</h2>"
        "<p>Medians (output tok/s as the scenario defines it); change = this run / baseline - 1 with its 95 % bootstrap "
        "interval; faster or slower only when the interval excludes 0.</p>"
        f"{table}<h2>Fingerprints</h2>{_table(prints)}"
    )


def render_html(run: RunResult, charts: Sequence[Path] = (), baseline: RunResult | None = None) -> str:
    """The run as one HTML page: fingerprint, scenarios, the comparison with a baseline when given,
    charts (embedded), failures counted per scenario and kind."""
    fields = [{"field": k, "value": v} for k, v in fingerprint(run).items()]
    images = "".join(
        f'<figure><img alt="{html.escape(p.stem)}" src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}">'
        f"<figcaption>{html.escape(p.name)}</figcaption></figure>"
        for p in charts
    )
    failures = [
        {"scenario": s.summary.name, "kind": kind, "requests": count}
        for s in run.scenarios
        for kind, count in s.summary.failures_by_kind.items()
    ]
    style = (
        "body{font-family:sans-serif;margin:2em;max-width:80em}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #bbb;padding:.2em .5em;text-align:right}th{background:#eee}"
        "td:first-child,th:first-child{text-align:left}img{max-width:100%}"
    )
    title = f"servingctl bench {run.metadata.run_id}"
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>"
        f"<h2>Run</h2>{_table(fields)}<h2>Scenarios</h2>{_table(scenario_rows(run))}"
        f"<p>{html.escape(throughput_words(run.config.mode))}.</p>"
        f"{_comparison_html(baseline, run) if baseline is not None else ''}"
        f"<h2>Failures by kind</h2>{_table(failures)}<h2>Charts</h2>{images or '<p>none</p>'}</body></html>"
    )


def write_tables(
    run: RunResult, directory: Path | str, charts: Sequence[Path] = (), baseline: RunResult | None = None
) -> list[Path]:
    """Write requests.csv, scenarios.csv and report.html (with `charts` embedded, and the comparison
    with `baseline` when given) into DIR."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    files = {
        REQUESTS_CSV: to_csv(request_rows(run)),
        SCENARIOS_CSV: to_csv(scenario_rows(run)),
        REPORT_HTML: render_html(run, charts, baseline),
    }
    for name, text in files.items():
        (out / name).write_text(text, encoding="utf-8")
    return [out / name for name in files]
