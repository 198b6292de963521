"""The markdown report (report.md): warnings first, the reference's results table, latency detail,
server and client checks, failures, run metadata with what is needed to reproduce the run, and
optionally the cost comparison and a side-by-side of a baseline run."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from servingctl.loadgen.bootstrap import MIN_UNITS, RESAMPLES
from servingctl.loadgen.metrics import failure_words
from servingctl.loadgen.outputs.capacity import (
    GOODPUT_HEADER,
    GOODPUT_WORDS,
    cost_line,
    goodput_rows,
    slo_text,
    sweep_lines,
    throughput_words,
)
from servingctl.loadgen.outputs.fingerprint import FingerprintRow, compare_fingerprints, prompts_text
from servingctl.loadgen.outputs.rows import ComparedFigure, ComparedScenario, compare_runs, scenario_rows
from servingctl.loadgen.stats import resolved, tail_rule
from servingctl.schema.comparison import Comparison
from servingctl.schema.results import REDACTED, RunConfig, RunResult, ScenarioSummary, ServerChecks

DASH = "–"
RESULTS_HEADER = (
    "scenario",
    "input tokens",
    "concurrency",
    "output tok/s",
    "E2E tok/s per request",
    "median TTFT ms",
    "decode tok/s",
    "p90 TTFT ms",
    "p99 TTFT ms",
    "ok / failed",
)


def fmt(value: float | None, digits: int = 2) -> str:
    """A number with fixed decimals and thousands separators, or a dash when missing."""
    return DASH if value is None else f"{value:,.{digits}f}"


def fmt_tail(value: float | None, count: int, q: float, digits: int = 2) -> str:
    """A q-quantile of `count` samples, or '– n=5' where they are too few to resolve it (stats.tail_rule)."""
    shown = resolved(value, count, q)
    return fmt(shown, digits) if shown is not None or count == 0 else f"{DASH} n={count}"


def fmt_pct(value: float | None) -> str:
    """A signed percentage with one decimal, or a dash."""
    return DASH if value is None else f"{value:+.1f} %"


def table(header: Sequence[str], rows: Iterable[Sequence[str]], right_from: int = 1) -> list[str]:
    """A GitHub markdown table; columns from `right_from` on are right-aligned (numbers)."""
    align = ["---" if i < right_from else "---:" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def warnings(run: RunResult) -> list[str]:
    """Everything a reader must see before trusting the numbers, most serious first."""
    out = []
    for s in (sc.summary for sc in run.scenarios):
        if s.client_bound:
            reasons = "; ".join(s.client.reasons) or "client self-check"
            out.append(
                f"**CLIENT-BOUND: {s.name}**: the benchmark client was the bottleneck ({reasons}); "
                "its figures are the client's limit, not the server's."
            )
        elif s.client.host_busy:
            out.append(
                f"**HOST BUSY: {s.name}**: the machine was busy, not the client ({'; '.join(s.client.host_reasons)}); "
                "its latencies include the machine's delay."
            )
    for s in (sc.summary for sc in run.scenarios):
        if s.failed:
            out.append(f"**REQUESTS FAILED: {s.name}**: {failure_words(s)}")
    if run.failed_scenarios:
        out.append(f"**FAILURE RATE ABOVE {run.config.max_failure_rate:g}**: {', '.join(run.failed_scenarios)} (exit code 1).")
    for s in (sc.summary for sc in run.scenarios):
        for failure in s.server.failures:
            out.append(f"**SERVER CHECK FAILED: {s.name}**: {failure}")
        m = s.mismatches
        if m.prompt_tokens or m.completion_tokens or m.finish_reason:
            out.append(
                f"**USAGE MISMATCH: {s.name}**: prompt_tokens {m.prompt_tokens}, completion_tokens "
                f"{m.completion_tokens}, finish_reason {m.finish_reason} requests disagree with what was asked."
            )
        if not s.token_counts_exact:
            out.append(f"{s.name}: per-chunk token counts are approximate (no continuous usage stats).")
        out += [f"UNMEASURED {s.name}: {reason}" for reason in s.unmeasured]
    return out


def results_table(run: RunResult) -> list[str]:
    """The reference's columns plus TTFT tail and outcome counts, one row per scenario."""
    rows = [
        (
            r.name + (" ⚠ client-bound" if r.client_bound else " ⚠ host busy" if r.host_busy else ""),
            str(r.input_tokens),
            str(r.concurrency),
            fmt(r.output_tok_s),
            fmt(r.e2e_tok_s),
            fmt(r.ttft_median_ms, 1),
            fmt(r.decode_tok_s),
            fmt_tail(r.ttft_p90_ms, r.ttft_samples, 0.90, 1),
            fmt_tail(r.ttft_p99_ms, r.ttft_samples, 0.99, 1),
            f"{r.ok} / {r.failed}",
        )
        for r in scenario_rows(run)
    ]
    return [*table(RESULTS_HEADER, rows), "", throughput_words(run.config.mode) + ".", "", tail_rule() + "."]


def latency_table(summaries: Sequence[ScenarioSummary]) -> list[str]:
    """Distributions behind the headline medians."""
    header = (
        "scenario",
        "TTFT min / mean / max ms",
        "TTFC / TTFT / TTFOT median ms",
        "E2E median / p99 ms",
        "TPOT median ms",
        "ITL median / p99 ms (coalesced gaps)",
        "chunk gap median ms",
        "tokens per chunk",
        "output tok/s per round",
    )
    rows = []
    for s in summaries:
        chunks = ", ".join(f"{k}: {v}" for k, v in sorted(s.tokens_per_chunk.items())) or DASH
        rounds = ", ".join(fmt(v) for v in s.rounds_output_tok_s) or DASH
        if s.steady_window:
            rounds = f"steady window {fmt(s.steady_window.duration_s, 1)} s ({s.steady_window.method})"
        rows.append(
            (
                s.name,
                f"{fmt(s.ttft_ms.min, 1)} / {fmt(s.ttft_ms.mean, 1)} / {fmt(s.ttft_ms.max, 1)}",
                f"{fmt(s.ttfc_ms.median, 1)} / {fmt(s.ttft_ms.median, 1)} / {fmt(s.ttfot_ms.median, 1)}",
                f"{fmt(s.e2e_ms.median, 1)} / {fmt_tail(s.e2e_ms.p99, s.e2e_ms.count, 0.99, 1)}",
                fmt(s.tpot_ms.median),
                f"{fmt(s.itl_ms.median)} / {fmt_tail(s.itl_ms.p99, s.itl_ms.count, 0.99)} ({s.coalesced_gaps} of {s.chunk_gaps})",
                fmt(s.chunk_gap_ms.median),
                chunks,
                rounds,
            )
        )
    return table(header, rows)


def _check(ok: bool | None, text: str) -> str:
    """A check cell: the figures, marked ✓ / ✗, or n/a when the server exposes nothing."""
    if ok is None:
        return f"{text} (n/a)" if text != DASH else "n/a"
    return f"{text} {'✓' if ok else '✗'}"


def _server_cells(c: ServerChecks) -> tuple[str, str, str, str]:
    """Generated tokens, prefix-cache hits, spec-decode acceptance and peak running cells."""
    if not c.available:
        unavailable = f"unavailable ({c.reason})" if c.reason else "unavailable"
        return unavailable, DASH, DASH, DASH
    tokens = f"{fmt(c.generation_tokens_delta, 0)} / {fmt(c.client_completion_tokens, 0)}"
    hits = f"{fmt(c.prefix_cache_hits_delta, 0)} of {fmt(c.prefix_cache_queries_delta, 0)} queried"
    accept = DASH
    if c.spec_decode_acceptance_rate is not None:
        accept = (
            f"{c.spec_decode_acceptance_rate:.1%} ({fmt(c.spec_decode_accepted_tokens_delta, 0)} of "
            f"{fmt(c.spec_decode_draft_tokens_delta, 0)} drafts)"
        )
    peak = f"{fmt(c.peak_running, 0)} / {fmt(c.intended_concurrency, 0)}"
    return (
        _check(c.generation_tokens_equal, tokens),
        _check(c.prefix_cache_ok, hits),
        accept,
        _check(c.peak_running_ok, peak),
    )


def checks_table(summaries: Sequence[ScenarioSummary]) -> list[str]:
    """Server cross-checks, usage checks and the client self-check of every scenario."""
    header = (
        "scenario",
        "generated tokens server / client",
        "prefix-cache hits",
        "spec-decode acceptance",
        "peak running / intended",
        "usage mismatches",
        "client CPU share / loop lag p99 ms",
    )
    rows = []
    for s in summaries:
        m = s.mismatches
        mismatches = m.prompt_tokens + m.completion_tokens + m.finish_reason
        client = f"{s.client.cpu_share:.0%} / {fmt_tail(s.client.loop_lag_ms.p99, s.client.loop_lag_ms.count, 0.99, 1)}"
        rows.append(
            (
                s.name,
                *_server_cells(s.server),
                "none ✓" if not mismatches else f"{mismatches} ✗",
                client + (" ✗ client-bound" if s.client_bound else " ✗ host busy" if s.client.host_busy else " ✓"),
            )
        )
    return table(header, rows)


def failures_section(summaries: Sequence[ScenarioSummary]) -> list[str]:
    """Failed requests per kind, and usage mismatch examples; empty when nothing failed."""
    lines = []
    for s in summaries:
        if s.failed:
            lines.append(f"- {s.name}: {failure_words(s)}")
        lines += [f"- {s.name}: {example}" for example in s.mismatches.examples]
    return ["## Failures", "", *lines, ""] if lines else []


def secret_env(header: str) -> str:
    """The environment variable the reproduce command reads a redacted header's value from."""
    return re.sub(r"[^A-Za-z0-9]", "_", header).upper()


def secret_envs(run: RunResult) -> list[str]:
    """The environment variables the reproduce command needs set (the API key, redacted headers)."""
    c = run.config
    return (["API_KEY"] if c.api_key_set else []) + [secret_env(k) for k, v in c.headers.items() if v == REDACTED]


def bench_command(run: RunResult) -> str:
    """The `servingctl bench` command line that repeats this run (secrets read from the shell's environment)."""
    c = run.config
    parts = ["servingctl bench", f"--endpoint {c.endpoint}", f"--model {c.model}"]
    if c.api != "chat":
        parts.append(f"--api {c.api}")
    if c.api_key_set:
        parts.append("--api-key $API_KEY")
    parts += [
        f'--header "{k}:${secret_env(k)}"' if v == REDACTED else f"--header {shlex.quote(f'{k}:{v}')}"
        for k, v in c.headers.items()
    ]
    if c.dataset is not None:
        parts.append(f"--dataset {shlex.quote(c.dataset.source)}")
        if c.dataset.format is not None:
            parts.append(f"--dataset-format {c.dataset.format}")
        if c.dataset.num_prompts is not None:
            parts.append(f"--num-prompts {c.dataset.num_prompts}")
        if c.dataset.output_tokens != "max-tokens":
            parts.append(f"--dataset-output-tokens {c.dataset.output_tokens}")
        if c.dataset.multi_turn:
            parts.append("--multi-turn")
        if c.think_time_s:
            parts.append(f"--think-time {c.think_time_s:g}")
        if c.replay_speed is not None:
            parts.append(f"--replay {c.replay_speed:g}")
    elif c.input_distribution is not None:
        parts.append(f"--input-dist {c.input_distribution.label()}")
    else:
        parts.append(f"--input-tokens {','.join(map(str, c.input_tokens))}")
    if c.output_distribution is not None:
        parts.append(f"--output-dist {c.output_distribution.label()}")
    parts += [f"--concurrency {','.join(map(str, c.concurrencies))}", f"--mode {c.mode}"]
    if c.rates:
        parts.append(f"--rate {','.join(f'{r:g}' for r in c.rates)}")
    elif c.rate is not None:
        parts.append(f"--rate {c.rate:g}")
    if c.arrivals != "poisson":
        parts.append(f"--arrivals {c.arrivals}")
    parts.append(f"--warmup {c.warmup_label()}")
    if c.mode == "burst":
        parts.append(f"--rounds {c.rounds}")
    if c.requests is not None:
        parts.append(f"--requests {c.requests}")
    if c.duration_s is not None:
        parts.append(f"--duration {c.duration_s:g}")
    parts += [
        f"--max-tokens {c.max_tokens}",
        f"--seed {c.seed}",
        f"--salt-mode {c.salt_mode}",
        f"--max-failure-rate {c.max_failure_rate:g}",
        f"--timeout {c.timeout_s:g}",
    ]
    if c.slos:
        parts.append(f"--slo {','.join(slo.label() for slo in c.slos)}")
    if c.slo_share != 1.0:
        parts.append(f"--slo-share {c.slo_share:g}")
    if c.sweep and c.mode == "rate":
        parts += [
            "--sweep",
            f"--sweep-start-rate {c.sweep_start_rate:g}",
            f"--sweep-max-rate {c.sweep_max_rate:g}",
            f"--sweep-resolution {c.sweep_resolution:g}",
            f"--sweep-max-steps {c.sweep_max_steps}",
        ]
    elif c.sweep:
        parts += ["--sweep", f"--sweep-max-concurrency {c.sweep_max_concurrency}", f"--sweep-max-steps {c.sweep_max_steps}"]
    # The flag is not in the config: each scenario records the processes it ran over (the flag capped
    # by its streams and requests), so the most of them spreads every scenario as this run did.
    processes = max((s.summary.client.processes for s in run.scenarios), default=1)
    if processes > 1:
        parts.append(f"--processes {processes}")
    return " \\\n  ".join(parts)


def _warm_up(c: RunConfig) -> str:
    return f"{c.warmup_s:g} s of warm-up load" if c.warmup_s is not None else f"{c.warmup} warm-up rounds"


def metadata_section(run: RunResult) -> list[str]:
    """Who measured what, when, against which server, and how to run it again."""
    c, m = run.config, run.metadata
    server_models = ", ".join(str(d.get("id")) for d in (m.server_models or {}).get("data", [])) or DASH
    server_version = ", ".join(f"{k} {v}" for k, v in (m.server_version or {}).items()) or DASH
    rows = [
        ("run id", m.run_id),
        ("endpoint", c.endpoint),
        ("model", c.model),
        ("API", "/v1/completions" if c.api == "completions" else "/v1/chat/completions"),
        ("server version (/version)", server_version),
        ("server models (/v1/models)", server_models),
        (
            "mode",
            c.mode
            + (f" at {', '.join(f'{r:g}' for r in c.rates)} req/s" if c.rates else f" at {c.rate:g} req/s" if c.rate else "")
            + (f", {c.arrivals} arrivals" if c.mode == "rate" else ""),
        ),
        (
            "load",
            f"{_warm_up(c)} + {c.rounds} measured rounds"
            if c.mode == "burst"
            else f"{_warm_up(c)}, {c.requests or DASH} requests, duration {fmt(c.duration_s, 0)} s",
        ),
        ("max tokens / seed / salt mode", f"{c.max_tokens} / {c.seed} / {c.salt_mode}"),
        ("prompts", prompts_text(run)),
        ("started / finished", f"{m.started_at.isoformat()} / {m.finished_at.isoformat() if m.finished_at else DASH}"),
        ("client", f"{m.client} {m.client_version}, Python {m.python_version}" + (f", host {m.hostname}" if m.hostname else "")),
        ("results schema", f"version {run.schema_version}"),
    ]
    calib = [
        (str(k.target_tokens), str(k.actual_tokens), k.method, str(k.repetitions), str(k.probes), "; ".join(k.warnings) or DASH)
        for k in run.calibrations
    ]
    return [
        "## Run",
        "",
        *table(("field", "value"), rows, right_from=2),
        "",
        "### Calibration",
        "",
        *table(("target tokens", "actual tokens", "method", "repetitions", "probes", "warnings"), calib, right_from=0),
        "",
        "### Reproduce",
        "",
        "```",
        bench_command(run),
        "```",
        "",
        *(
            [f"Set {', '.join(secrets)} in the environment first: secret values are not stored with a run.", ""]
            if (secrets := secret_envs(run))
            else []
        ),
    ]


def costs_section(comparison: Comparison | Mapping[str, Comparison], client_bound: frozenset[str] = frozenset()) -> list[str]:
    """Self-hosted vs managed API per scenario (or for one given comparison); client-bound ones marked."""
    # Input order (in64 before in128), as the results table: not the names' alphabetical order.
    items = (
        sorted(comparison.items(), key=lambda kv: (kv[1].inputs.input_tokens, len(kv[0]), kv[0]))
        if isinstance(comparison, Mapping)
        else [(DASH, comparison)]
    )
    header = (
        "scenario",
        "input tokens",
        "output tokens",
        "output tok/s",
        "self-hosted USD / month",
        "managed API USD / month",
        "self-hosted / API",
        "self-hosted USD per 1M output",
        "break-even utilization",
    )
    rows = [
        (
            name + (" ⚠ client-bound" if name in client_bound else ""),
            str(c.inputs.input_tokens),
            str(c.inputs.output_tokens),
            fmt(c.inputs.output_tok_s),
            fmt(c.self_hosted_monthly_usd, 0),
            fmt(c.api_monthly_usd, 0),
            fmt(c.ratio_self_hosted_to_api),
            fmt(c.self_hosted_usd_per_m_output),
            f"{c.break_even_utilization:.0%}" if c.breaks_even else "never",
        )
        for name, c in items
    ]
    best = min((c for _, c in items), key=lambda c: c.break_even_utilization, default=None)
    first = next(iter(c for _, c in items), None)
    assumption = (
        f"Assumes the measured output tok/s is sustained {first.inputs.hours:g} h a month; managed API at "
        f"{first.inputs.api_input_usd_per_m:g} / {first.inputs.api_output_usd_per_m:g} USD per 1M input / output tokens."
        if first
        else ""
    )
    verdict = [f"Best scenario ({next(n for n, c in items if c is best)}): {best.break_even_words()}.", ""] if best else []
    return ["## Cost per token", "", assumption, "", *table(header, rows), "", *verdict]


def _interval(f: ComparedFigure) -> str:
    """The change with its bootstrap interval, or the sample counts that were too few."""
    if f.low_pct is not None and f.high_pct is not None:
        return f"{fmt_pct(f.change_pct)} [{f.low_pct:+.1f}, {f.high_pct:+.1f}]"
    return f"{fmt_pct(f.change_pct)} ({f.units[0]} vs {f.units[1]} {f.unit})"


def comparison_section(
    compared: Sequence[ComparedScenario], baseline_id: str, run_id: str, fingerprints: Sequence[FingerprintRow] = ()
) -> list[str]:
    """Side-by-side of a baseline and this run: per scenario and figure both values, the change with
    its bootstrap interval and the verdict; then both fingerprints, differing fields in bold."""
    confidence = f"{compared[0].confidence:.0%}" if compared else "95%"
    header = ("scenario", "figure", "baseline", "this run", f"change [{confidence} CI]", "verdict")
    rows = []
    for sc in compared:
        name = sc.name + (" ⚠ client-bound" if sc.client_bound else "")
        if not (sc.in_baseline and sc.in_run):
            rows.append((name + " (only in " + ("baseline" if sc.in_baseline else "this run") + ")", "", "", "", "", ""))
            continue
        for i, f in enumerate(sc.figures):
            digits = 1 if f.metric.endswith("_ms") else 2
            rows.append((name if i == 0 else "", f.label, fmt(f.baseline, digits), fmt(f.run, digits), _interval(f), f.verdict))
    note = (
        f"Baseline {baseline_id} → this run {run_id}. Medians (output tok/s: of the burst rounds, or the steady window's "
        f"throughput); change = this run / baseline − 1 with its {confidence} bootstrap interval ({RESAMPLES} resamples of "
        f"the requests, rounds or window slices); a change is called faster or slower only when the interval excludes 0, "
        f"and not at all with fewer than {MIN_UNITS} on a side."
    )
    lines = [f"## Comparison with {baseline_id}", "", note, "", *table(header, rows, right_from=2), ""]
    if fingerprints:
        marked = [
            (f"**{r.field}**", f"**{r.baseline}**", f"**{r.run}**") if r.differs else (r.field, r.baseline, r.run)
            for r in fingerprints
        ]
        lines += [
            "Fingerprints (fields that differ in bold):",
            "",
            *table(("field", "baseline", "this run"), marked, right_from=3),
            "",
        ]
    return lines


def capacity_section(run: RunResult) -> list[str]:
    """## Goodput at the SLO (and the saturation sweep); nothing without SLOs."""
    if not run.config.slos:
        return []
    sweep = sweep_lines(run)
    lines = [
        "## Goodput at the SLO",
        "",
        f"SLOs: {slo_text(run)}. Goodput: requests meeting every per-request SLO "
        "(and their output tokens) per second of the measured duration, as `vllm bench serve --goodput`.",
        "",
    ]
    lines += [
        *table([h.replace("\n", " ") for h in GOODPUT_HEADER], goodput_rows(run), right_from=2),
        "",
        GOODPUT_WORDS + ".",
        "",
    ]
    if sweep:
        lines += [sweep[0], "", *(f"- {line}" for line in sweep[1:]), ""]
    if cost := cost_line(run):
        lines += [cost, ""]
    return lines


def render_report(
    run: RunResult,
    *,
    comparison: Comparison | Mapping[str, Comparison] | None = None,
    baseline: RunResult | None = None,
) -> str:
    """The whole report.md text of a run (with costs and a baseline comparison when given)."""
    summaries = sorted((s.summary for s in run.scenarios), key=lambda s: (s.input_tokens, s.concurrency, s.name))
    lines = [f"# Benchmark report: {run.metadata.run_id}", ""]
    lines += [f"{run.config.model} at {run.config.endpoint}, mode {run.config.mode}, max tokens {run.config.max_tokens}.", ""]
    if alerts := warnings(run):
        lines += ["## Warnings", "", *(f"- {a}" for a in alerts), ""]
    lines += ["## Results", ""]
    lines += [
        "Per-request figures are medians over successful measured requests; "
        "TTFT counts from the first content or reasoning chunk.",
        "",
    ]
    lines += [*results_table(run), ""]
    lines += capacity_section(run)
    if baseline is not None:
        lines += comparison_section(
            compare_runs(baseline, run), baseline.metadata.run_id, run.metadata.run_id, compare_fingerprints(baseline, run)
        )
    if comparison:
        lines += costs_section(comparison, frozenset(s.name for s in summaries if s.client_bound))
    lines += ["## Latency detail", "", *latency_table(summaries), ""]
    lines += ["## Charts", ""]
    if run.sweep is not None:
        lines += [
            "The sweep's search: each step's figures against the SLO limits, and its goodput, marked met, "
            "missed, saturated or stalled and numbered in run order; the answer shaded:",
            "",
            "![the saturation sweep's search](sweep.png)",
            "",
        ]
    lines += ["![TTFT by input length](ttft.png)", ""]
    if any(s.server_timeline for s in run.scenarios):
        lines += [
            "The server's /metrics, sampled about once a second during each scenario (shaded bands):",
            "",
            "![server metrics over time](server_metrics.png)",
            "",
        ]
    lines += ["## Checks", "", *checks_table(summaries), ""]
    lines += failures_section(summaries)
    lines += metadata_section(run)
    return "\n".join(lines)


def write_report(
    run: RunResult,
    directory: Path | str,
    *,
    comparison: Comparison | Mapping[str, Comparison] | None = None,
    baseline: RunResult | None = None,
) -> Path:
    """Write DIR/report.md and return its path."""
    path = Path(directory) / "report.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(run, comparison=comparison, baseline=baseline))
    return path
