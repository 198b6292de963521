"""Benchmark outputs: results.json, vLLM-compatible files, report.md, PNG charts, and the CSV tables
and self-contained report.html of a run."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from servingctl.loadgen.outputs.charts import write_charts
from servingctl.loadgen.outputs.markdown import render_report, write_report
from servingctl.loadgen.outputs.results_json import ResultsFileError, read_results, write_results
from servingctl.loadgen.outputs.rows import compare_runs, scenario_rows
from servingctl.loadgen.outputs.tables import write_tables
from servingctl.loadgen.outputs.vllm_compat import to_vllm, write_vllm
from servingctl.schema.comparison import Comparison
from servingctl.schema.results import RunResult

__all__ = [
    "ResultsFileError",
    "compare_runs",
    "read_results",
    "render_report",
    "scenario_rows",
    "to_vllm",
    "write_all",
    "write_charts",
    "write_report",
    "write_results",
    "write_tables",
    "write_vllm",
]


def write_all(
    run: RunResult,
    directory: Path | str,
    *,
    comparison: Comparison | Mapping[str, Comparison] | None = None,
    baseline: RunResult | None = None,
) -> list[Path]:
    """Write results.json, vllm/<scenario>.json, report.md, the PNG charts, requests.csv, scenarios.csv
    and report.html (the charts embedded) into DIR; returns the paths."""
    charts = write_charts(run, directory, baseline=baseline)
    return [
        write_results(run, directory),
        *write_vllm(run, directory),
        write_report(run, directory, comparison=comparison, baseline=baseline),
        *charts,
        *write_tables(run, directory, charts, baseline),
    ]
