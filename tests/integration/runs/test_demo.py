"""The demo script end to end on the simulator (make demo runs it with the real vLLM): every step
succeeds through the REST API, the report files are written, and nothing is left running."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from servingctl.loadgen.outputs import read_results
from servingctl_twin import demo


def test_the_demo_runs_the_main_path_and_leaves_nothing_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)  # the demo sets its own (restored after the test)
    code = demo.run_demo(tmp_path / "out", model_server="sim", time_scale=50.0, workdir=tmp_path / "work")
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    summary = json.loads((tmp_path / "work/demo.json").read_text())
    assert summary["steps"] == {
        "status": 0,
        "start": 0,
        "starts": 0,
        "bench": 0,
        "bench again": 0,
        "compare": 0,
        "sweep": 0,
        "stop": 0,
        "ledger": 0,
    }
    assert summary["left_running"] == []
    for step in (
        "$ servingctl start deepseek-v4-flash --wait",
        "$ servingctl bench --profile deepseek-v4-flash",
        "$ servingctl stop deepseek-v4-flash --wait",
        "$ servingctl costs ledger --profile deepseek-v4-flash",
    ):
        assert step in out
    assert "READY in" in out and "STOPPED in" in out  # the phases were followed to the end
    # the start's timeline: one start, each phase with its p50/p90/last seconds, and its chart
    assert "$ servingctl starts deepseek-v4-flash" in out and "deepseek-v4-flash: 1 start(s), 1 READY" in out
    for phase in (
        "instance boot and ECS registration",
        "image pull",
        "weights prefetch",
        "ALB health checks",
        "smoke test first token",
    ):
        assert re.search(rf"^\s*\d+\.\d\s+\d+\.\d\s+\d+\.\d  {phase}$", out, re.M), phase
    assert (tmp_path / "out/starts.png").read_bytes()[:4] == b"\x89PNG"
    assert "Self-hosted vs managed API" in out and "nothing left running: yes" in out
    run = read_results(tmp_path / "out")
    assert sorted(s.summary.name for s in run.scenarios) == ["in1024-c1", "in1024-c4", "in256-c1", "in256-c4"]
    # A CLIENT-BOUND row is explained from the run's own self-check: the worker's CPU and the host's load.
    bound = [s.summary for s in run.scenarios if s.summary.client.client_bound]
    assert ("==> why CLIENT-BOUND: " in out) == bool(bound), out[-3000:]
    if bound:
        assert f"{len(bound)} of 4 scenarios client-bound: the worker" in out
        assert f"{max(s.client.cpu_share for s in bound):.0%} of a core" in out
    assert {p.name for p in (tmp_path / "out").iterdir()} >= {
        "report.md",
        "results.json",
        "output_tok_s.png",
        "ttft.png",
        "vllm",
    }
    assert "g7e.12xlarge" in out and "12.17" in out  # the ledger entry at the instance's hourly price
    # the second run against the first, through the API: in256-c4 with intervals, the rest only in the baseline
    first, second = run.metadata.run_id, read_results(tmp_path / "out/again").metadata.run_id
    assert f"$ servingctl report {second} --compare {first}" in out
    assert f"{first} (baseline) -> {second} (this run)" in out and "in1024-c1: only in the baseline" in out
    compared = out[out.index("(baseline) ->") :].splitlines()
    heading = next(i for i, line in enumerate(compared) if line.split()[:1] == ["in256-c4"])  # maybe "(client-bound)"
    ttft = compared[heading + 2]  # the figure after output tok/s
    assert ttft.strip().startswith("TTFT ms") and "[" in ttft, "\n".join(compared)  # 12 requests a side: an interval
    assert "fingerprints (* differs)" in out and "server_metrics.png" in {p.name for p in (tmp_path / "out").iterdir()}
    assert (tmp_path / "out/compare/compare.png").is_file()
    # the profile serves with MTP (the simulator drafts): its acceptance is said under the table
    assert "spec-decode acceptance: in256-c1 " in out
    # the saturation sweep with an SLO: the concurrency found, its goodput and the cost per 1M at the SLO
    swept = read_results(tmp_path / "out/sweep")
    assert swept.sweep is not None and swept.sweep.found is not None and swept.slo_cost is not None
    at = next(s.summary for s in swept.scenarios if s.summary.name == swept.sweep.scenario)
    said = " ".join(out.split())
    assert f"highest concurrency meeting the SLOs = {swept.sweep.found}, goodput {at.slo.goodput_rps:.2f} req/s" in said
    assert f"self-hosting costs {swept.slo_cost.self_hosted_usd_per_m_output:,.2f} USD per 1M output tokens" in said
    report = (tmp_path / "out/sweep/report.md").read_text()
    assert "## Goodput at the SLO" in report and "Cost at the SLO:" in report
