"""Benchmark outputs: results.json, vLLM-compatible files, report.md and PNG charts of a run."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from servingctl.bench.outputs.charts import write_charts
from servingctl.bench.outputs.markdown import render_report, write_report
from servingctl.bench.outputs.results_json import ResultsFileError, read_results, write_results
from servingctl.bench.outputs.rows import compare_runs, scenario_rows
from servingctl.bench.outputs.vllm_compat import to_vllm, write_vllm
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
    "write_vllm",
]


def write_all(
    run: RunResult,
    directory: Path | str,
    *,
    comparison: Comparison | Mapping[str, Comparison] | None = None,
    baseline: RunResult | None = None,
) -> list[Path]:
    """Write results.json, vllm/<scenario>.json, report.md and the PNG charts into DIR; returns the paths."""
    return [
        write_results(run, directory),
        *write_vllm(run, directory),
        write_report(run, directory, comparison=comparison, baseline=baseline),
        *write_charts(run, directory, baseline=baseline),
    ]
