"""`servingctl report`: prints the table, writes every file, compares with a baseline, fails clearly."""

import json

from servingctl.loadgen.outputs import write_results
from servingctl.schema.results import SCHEMA_VERSION
from servingctl_cli.main import main


def test_report_prints_the_table_and_writes_all_files(run, tmp_path, capsys):
    write_results(run, tmp_path / "run")
    assert main(["report", str(tmp_path / "run" / "results.json"), "--output", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "mtp-on" in out and "2046" in out and "CLIENT-BOUND" in out
    s = next(x.summary for x in run.scenarios if x.summary.name == "in256-c2")
    assert f"{s.output_tok_s:.2f}" in out
    names = sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert names == [
        "output_tok_s.png",
        "report.html",
        "report.md",
        "requests.csv",
        "results.json",
        "scenarios.csv",
        "ttft.png",
        "vllm/in2048-c1.json",
        "vllm/in2048-c2.json",
        "vllm/in256-c1.json",
        "vllm/in256-c2.json",
    ]


def test_json_output_with_baseline_and_costs(run, baseline, tmp_path, capsys):
    write_results(run, tmp_path / "on")
    write_results(baseline, tmp_path / "off")
    code = main(
        [
            "report",
            str(tmp_path / "on"),
            "--compare",
            str(tmp_path / "off"),
            "--json",
            "--self-hosted-monthly-usd",
            "8887",
            "--api",
            "fireworks/deepseek-v4-flash",
        ]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["run_id"] == "mtp-on" and data["baseline_run_id"] == "mtp-off"
    first = data["comparison"][0]
    assert first["name"] == "in256-c1"
    agg = first["figures"][0]
    assert agg["metric"] == "output_tok_s"
    assert agg["change_pct"] == (agg["run"] - agg["baseline"]) / agg["baseline"] * 100
    assert data["costs"]["in256-c1"]["inputs"]["api_input_usd_per_m"] == 0.22
    assert (tmp_path / "on" / "compare.png").exists()
    assert "## Comparison with mtp-off" in (tmp_path / "on" / "report.md").read_text()
    assert "## Cost per token" in (tmp_path / "on" / "report.md").read_text()


def test_no_files_writes_nothing(run, tmp_path, capsys):
    write_results(run, tmp_path)
    assert main(["report", str(tmp_path), "--no-files"]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_newer_results_file_fails_with_exit_code_2(run, tmp_path, capsys):
    data = json.loads(run.model_dump_json()) | {"schema_version": SCHEMA_VERSION + 1}
    (tmp_path / "results.json").write_text(json.dumps(data))
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "servingctl report: error:" in err and "newer than this servingctl understands" in err


def test_unknown_api_is_named(run, tmp_path, capsys):
    write_results(run, tmp_path)
    assert main(["report", str(tmp_path), "--no-files", "--hourly-usd", "12", "--api", "nope"]) == 2
    assert "error: --api: unknown managed API 'nope'; allowed values: fireworks/deepseek-v4-flash" in capsys.readouterr().err


def test_report_of_a_run_id_uses_the_kept_copy_when_no_api_answers(run, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no twin recorded: no API at all
    monkeypatch.delenv("SERVINGCTL_API_URL", raising=False)
    run_id = "20261203T090000Z-abc123"
    assert main(["report", run_id, "--no-files"]) == 2
    err = capsys.readouterr().err
    assert f"{run_id}: not a file, no copy in servingctl-runs/{run_id}, and no API" in err
    write_results(run, tmp_path / "servingctl-runs" / run_id)  # what `bench --profile` wrote when it ended
    assert main(["report", run_id, "--no-files"]) == 0
    captured = capsys.readouterr()
    assert "mtp-on" in captured.out and "in256-c2" in captured.out
    assert "the API is out of reach (no API: pass --api-url" in captured.err
    assert f"reporting {run_id} from servingctl-runs/{run_id}/results.json" in captured.err


# The headline throughput's names before it became output_tok_s (its rounds: rounds_output_tok_s).
OLD_NAMES = (('"rounds_output_tok_s"', '"aggregate_tok_s_rounds"'), ('"output_tok_s"', '"aggregate_tok_s"'))


def test_report_reads_a_results_file_written_under_the_old_throughput_names(run, tmp_path, capsys):
    text = run.model_dump_json()
    for new, old in OLD_NAMES:
        assert new in text
        text = text.replace(new, old)
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "results.json").write_text(text)
    assert main(["report", str(tmp_path / "old" / "results.json"), "--output", str(tmp_path / "out")]) == 0
    s = next(x.summary for x in run.scenarios if x.summary.name == "in256-c2")
    assert f"{s.output_tok_s:.2f}" in capsys.readouterr().out
    # written again under the new names only, with the same figures
    rewritten = (tmp_path / "out" / "results.json").read_text()
    assert "aggregate_tok_s" not in rewritten and json.loads(rewritten) == json.loads(run.model_dump_json())
    header = (tmp_path / "out" / "scenarios.csv").read_text().splitlines()[0].split(",")
    assert "output_tok_s" in header and "aggregate_tok_s" not in header
    html = (tmp_path / "out" / "report.html").read_text()
    assert "<th>output_tok_s</th>" in html and "output tok/s: the median of the measured rounds" in html
