"""report.md: the table's numbers are the results file's, warnings are loud, checks and the
baseline comparison and costs are shown with the right figures."""

import re
import shlex
import subprocess

import pytest

from servingctl.costs import cost_comparisons
from servingctl.loadgen.outputs import read_results, write_all
from servingctl.loadgen.outputs.markdown import render_report
from servingctl.loadgen.slo import parse_slos
from servingctl.schema.results import RunConfig
from servingctl_cli.bench import config_from_args
from servingctl_cli.main import build_parser


def _section(text: str, title: str) -> str:
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def _table(section: str) -> list[list[str]]:
    lines = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def test_results_table_numbers_match_the_results_file(run, tmp_path):
    write_all(run, tmp_path)
    stored = read_results(tmp_path)
    rows = {r[0].split()[0]: r for r in _table(_section((tmp_path / "report.md").read_text(), "Results"))}
    assert set(rows) == {"in256-c1", "in256-c2", "in2048-c1", "in2048-c2"}
    for scenario in stored.scenarios:
        s = scenario.summary
        row = rows[s.name]
        assert row[1:3] == [str(s.input_tokens), str(s.concurrency)]
        assert float(row[3]) == pytest.approx(s.output_tok_s, abs=0.005)
        assert float(row[4]) == pytest.approx(s.e2e_tok_s.median, abs=0.005)
        assert float(row[5]) == pytest.approx(s.ttft_ms.median, abs=0.05)
        assert float(row[6]) == pytest.approx(s.decode_tok_s.median, abs=0.005)
        # A handful of requests cannot tell a p90 or p99 from the slowest one: a dash and the count.
        assert s.ttft_ms.count < 10
        assert row[7] == row[8] == f"– n={s.ttft_ms.count}"
        assert row[9] == f"{s.ok} / {s.failed}"
    assert rows["in256-c2"][7] == "– n=3"  # its TTFTs are 150, 150, 160 ms
    results = _section((tmp_path / "report.md").read_text(), "Results")
    assert "percentiles need p90 >= 10 samples, p95 >= 20, p99 >= 100; – n=N: too few" in results


def test_a_percentile_is_printed_from_its_limit_of_samples_and_not_one_below(run):
    from servingctl.loadgen.outputs.markdown import fmt_tail

    assert fmt_tail(158.0, 10, 0.90, 1) == "158.0" and fmt_tail(158.0, 9, 0.90, 1) == "– n=9"
    assert fmt_tail(158.0, 100, 0.99, 1) == "158.0" and fmt_tail(158.0, 99, 0.99, 1) == "– n=99"
    assert fmt_tail(None, 0, 0.99) == "–"  # no samples at all: nothing to count


def test_client_bound_and_failures_are_flagged_before_the_numbers(run):
    text = render_report(run)
    warnings = _section(text, "Warnings")
    assert text.index("## Warnings") < text.index("## Results")
    assert "**CLIENT-BOUND: in2048-c2**" in warnings and "event-loop lag p99 25.0 ms" in warnings
    assert "**FAILURE RATE ABOVE 0**: in256-c2" in warnings
    rows = {r[0]: r for r in _table(_section(text, "Results"))}
    assert "in2048-c2 ⚠ client-bound" in rows
    expected = "in256-c2: 1 of 4 failed (25.0%): stream_cut 1 (e.g. RemoteProtocolError: peer closed connection)"
    assert expected in _section(text, "Failures")
    assert "**REQUESTS FAILED: in256-c2**: " + expected.removeprefix("in256-c2: ") in warnings


def test_checks_show_server_counters_cache_hits_acceptance_and_peak(run):
    checks = {r[0]: r for r in _table(_section(render_report(run), "Checks"))}
    # in256-c1: 3 rounds x 1 request x 4 tokens, counted by the server and the client.
    assert checks["in256-c1"][1] == "12 / 12 ✓"
    assert checks["in256-c1"][2] == "0 of 768 queried ✓"
    assert checks["in256-c1"][3] == "66.0% (66 of 100 drafts)"
    assert checks["in256-c1"][4] == "1 / 1 ✓"
    assert checks["in2048-c2"][6].endswith("✗ client-bound")


def test_failed_server_check_is_a_warning(run):
    server = run.scenarios[0].summary.server
    server.generation_tokens_equal = False
    server.failures.append("server generated 13 tokens, client counted 12")
    text = render_report(run)
    assert "**SERVER CHECK FAILED: in256-c1**: server generated 13 tokens, client counted 12" in _section(text, "Warnings")
    assert _table(_section(text, "Checks"))[0][1] == "12 / 12 ✗"


def test_metadata_and_reproduce_command_without_secrets(run):
    text = render_report(run)
    assert "sk-secret" not in text
    run_section = _section(text, "Run")
    assert "| server version (/version) | version 0.32.0 |" in run_section
    assert "--header X-LLM-Profile:deepseek-v4-flash" in run_section
    assert '--header "Authorization:$AUTHORIZATION"' in run_section
    assert "--input-tokens 256,2048" in run_section and "--concurrency 1,2" in run_section
    assert "| 2048 | 2046 | tokenize |" in run_section


def _command(run) -> str:
    return _section(render_report(run), "Run").split("```\n", 1)[1].split("\n```", 1)[0]


def _reproduced(run) -> tuple[RunConfig, int]:
    """The report's reproduce command as the CLI parses it: the config it runs and its --processes."""
    words = shlex.split(_command(run).replace("\\\n", " "))
    assert words[:2] == ["servingctl", "bench"]
    args = build_parser().parse_args(words[1:])
    return config_from_args(args), args.processes


def test_reproduce_command_reads_a_redacted_header_from_the_environment_it_names(run):
    assert run.config.headers["Authorization"] == "<redacted>"
    header = next(word for word in shlex.split(_command(run).replace("\\\n", " "), posix=False) if "Authorization" in word)
    shell = subprocess.run(
        ["bash", "-c", f"printf %s {header}"],
        env={"AUTHORIZATION": "Bearer sk-1 'x'"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert shell.stdout == "Authorization:Bearer sk-1 'x'"
    assert "Set AUTHORIZATION in the environment first" in _section(render_report(run), "Run")


@pytest.mark.parametrize("processes", [1, 2])
def test_reproduce_command_runs_the_same_config_over_the_same_processes(run, processes):
    run.scenarios[-1].summary.client.processes = processes  # in2048-c2, spread or not
    config, spread_over = _reproduced(run)
    assert config == run.config and spread_over == processes  # the redacted header too
    assert ("--processes" in render_report(run)) is (processes > 1)


def test_reproduce_command_keeps_a_sweep_and_its_slos(run):
    run.config = run.config.model_copy(
        update={
            "input_tokens": [256],
            "slos": parse_slos("ttft_ms=500,itl_ms:p90=50"),
            "slo_share": 0.9,
            "sweep": True,
            "sweep_max_concurrency": 64,
            "sweep_max_steps": 8,
        }
    )
    config, _ = _reproduced(run)
    assert config == run.config


def test_comparison_shows_both_runs_the_change_and_why_no_interval(run, baseline):
    text = render_report(run, baseline=baseline)
    section = _section(text, "Comparison with mtp-off")
    rows, scenario = {}, ""
    for r in _table(section.split("Fingerprints")[0]):
        scenario = r[0] or scenario
        rows[(scenario, r[1])] = r
    base = {s.summary.name: s.summary for s in baseline.scenarios}
    this = {s.summary.name: s.summary for s in run.scenarios}
    b, r = base["in256-c1"].output_tok_s, this["in256-c1"].output_tok_s
    agg = rows[("in256-c1", "output tok/s")]
    assert agg[2:4] == [f"{b:.2f}", f"{r:.2f}"] and agg[4] == f"{(r - b) / b * 100:+.1f} % (2 vs 2 rounds)"
    # 2 rounds of 1 request a side: too few to resample, and the report says so instead of guessing.
    assert {row[5] for key, row in rows.items() if key[0] == "in256-c1"} == {"too few"}
    # Decode speed doubled (chunk gaps halved): +100 %; median TTFT rose from 90 to 100 ms: +11.1 %.
    assert rows[("in256-c1", "decode tok/s")][2:5] == ["50.00", "100.00", "+100.0 % (2 vs 2 requests)"]
    assert rows[("in256-c1", "TTFT ms")][2:5] == ["90.0", "100.0", "+11.1 % (2 vs 2 requests)"]
    assert ("in2048-c2 ⚠ client-bound (only in this run)", "") in rows
    # the fingerprints: the server version is the same, nothing else differs in these fixtures
    fields = {r[0]: r for r in _table(section.split("Fingerprints")[1])}
    assert fields["vLLM version"] == ["vLLM version", "0.32.0", "0.32.0"]
    assert not any(name.startswith("**") for name in fields)


def test_cost_section_reproduces_the_comparison(run):
    comparisons = cost_comparisons(run, api_input_usd_per_m=0.22, api_output_usd_per_m=0.66, self_hosted_monthly_usd=8887)
    rows = {r[0]: r for r in _table(_section(render_report(run, comparison=comparisons), "Cost per token"))}
    c = comparisons["in256-c1"]
    # aggregate x 730 h x 3600 s output tokens; input = output / 4 x 254; API = in x 0.22 + out x 0.66 per 1M.
    out = run.scenarios[0].summary.output_tok_s * 730 * 3600
    api = out / 4 * 254 / 1e6 * 0.22 + out / 1e6 * 0.66
    assert c.api_monthly_usd == pytest.approx(api)
    assert rows["in256-c1"][5] == f"{api:,.0f}"
    assert rows["in256-c1"][6] == f"{8887 / api:.2f}"
    assert rows["in2048-c2 ⚠ client-bound"]


def test_single_comparison_is_rendered_too(run):
    comparisons = cost_comparisons(run, api_input_usd_per_m=0.22, api_output_usd_per_m=0.66, hourly_usd=12.0)
    text = render_report(run, comparison=comparisons["in256-c1"])
    assert re.search(r"\| – \| 254 \| 4 \| 30\.53 \| 8,760 \|", _section(text, "Cost per token"))


def test_unmeasured_figures_are_warned_and_ttfc_ttfot_and_coalesced_gaps_shown(run):
    s = run.scenarios[0].summary
    s.unmeasured = ["decode_tok_s: 1 of 1 requests got all their tokens in one network read"]
    s.ttfc_ms, s.ttfot_ms = s.ttft_ms.model_copy(update={"median": 99.0}), s.ttft_ms.model_copy(update={"median": 123.0})
    s.coalesced_gaps, s.chunk_gaps = 3, 8
    text = render_report(run)
    assert f"UNMEASURED {s.name}: decode_tok_s: 1 of 1 requests" in _section(text, "Warnings")
    latency = next(line for line in text.splitlines() if line.startswith(f"| {s.name} ") and "(3 of 8)" in line)
    assert f"99.0 / {s.ttft_ms.median:.1f} / 123.0" in latency


def test_the_two_throughputs_are_named_apart(run):
    run.config = run.config.model_copy(update={"slos": parse_slos("ttft_ms=500")})
    text = render_report(run)
    results = _section(text, "Results")
    assert "output tok/s: the median of the measured rounds, each round's output tokens / its wall time." in results
    goodput = _section(text, "Goodput at the SLO")
    assert "goodput tok/s: output tokens of the requests meeting every SLO over the measured duration" in goodput
    assert "not output tok/s's median of rounds" in goodput
