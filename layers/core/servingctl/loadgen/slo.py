"""Service-level objectives and goodput: parse `--slo`, judge a scenario against the SLOs.

Semantics follow `vllm bench serve --goodput` (vllm/benchmarks/serve.py): a request is good when it
succeeded and each per-request metric is at most its limit (ttft, tpot, e2el; a request of one token
has tpot 0); goodput = good requests / the benchmark's duration. servingctl adds percentile SLOs
(`ttft_ms:p90=500`: the scenario's p90 TTFT must be at most 500 ms) and a required share of good
requests (`--slo-share`); a scenario meets its SLOs when both hold.
"""

from __future__ import annotations

from collections.abc import Sequence

from servingctl.schema.results import (
    SLO_METRICS,
    SLO_PERCENTILES,
    RequestRecord,
    RoundResult,
    ScenarioSummary,
    Slo,
    SloCheck,
    SloResult,
)
from servingctl.wording import words

NS_PER_S = 1_000_000_000
_SUMMARY_FIELD = {"ttft_ms": "ttft_ms", "itl_ms": "itl_ms", "e2e_s": "e2e_ms"}


class SloError(ValueError):
    """A --slo text that cannot be read; the message names the part and the allowed values."""


def parse_slos(text: str) -> list[Slo]:
    """`ttft_ms=500,itl_ms:p90=50,e2e_s=20` -> SLOs (metric[:percentile]=limit, comma-separated)."""
    slos: list[Slo] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        metric, _, pct = key.strip().partition(":")
        if not sep:
            raise SloError(f"{part!r}: expected METRIC=LIMIT or METRIC:PERCENTILE=LIMIT, e.g. ttft_ms:p90=500")
        if metric not in SLO_METRICS:
            raise SloError(f"{part!r}: metric must be one of {words(SLO_METRICS)}")
        if pct and pct not in SLO_PERCENTILES:
            raise SloError(f"{part!r}: percentile must be one of {words(SLO_PERCENTILES)} (or none: every request)")
        try:
            limit = float(value)
        except ValueError:
            raise SloError(f"{part!r}: limit must be a positive number ({'seconds' if metric == 'e2e_s' else 'ms'})") from None
        if not limit > 0:
            raise SloError(f"{part!r}: limit must be a positive number ({'seconds' if metric == 'e2e_s' else 'ms'})")
        # Validated against the model's literals (already checked above, with friendlier messages).
        slos.append(Slo.model_validate({"metric": metric, "limit": limit, "percentile": pct or None}))
    if not slos:
        raise SloError(f"{text!r}: expected at least one SLO, e.g. ttft_ms=500,itl_ms=50")
    seen = [(s.metric, s.percentile) for s in slos]
    if len(set(seen)) != len(seen):
        raise SloError(f"{text!r}: each metric and percentile at most once")
    return slos


def measured_duration_s(mode: str, rounds: Sequence[RoundResult], measured: Sequence[RequestRecord]) -> float:
    """The measured requests' wall time: burst = sum of measured rounds; else first send to last end."""
    timed = [r for r in rounds if not r.warmup]
    if mode == "burst" and timed:
        return sum(r.t_end_ns - r.t_start_ns for r in timed) / NS_PER_S
    if not measured:
        return 0.0
    end = max((r.t_end_ns if r.t_end_ns is not None else r.t_start_ns) for r in measured)
    return (end - min(r.t_start_ns for r in measured)) / NS_PER_S


def request_value(record: RequestRecord, metric: str) -> float | None:
    """A request's own value of an SLO metric (itl_ms: its TPOT, 0 for one token, as vLLM)."""
    if metric == "ttft_ms":
        return record.ttft_ms
    if metric == "e2e_s":
        return record.e2e_ms / 1000.0 if record.e2e_ms is not None else None
    return record.tpot_ms if record.tpot_ms is not None else 0.0


def meets(record: RequestRecord, slos: Sequence[Slo]) -> bool:
    """A successful request whose every per-request SLO metric is at most its limit."""
    if not record.ok:
        return False
    for slo in slos:
        value = request_value(record, slo.metric)
        if value is None or value > slo.limit:
            return False
    return True


def _percentile_value(summary: ScenarioSummary, slo: Slo) -> float | None:
    """The scenario's percentile of an SLO metric (from the summary's distributions)."""
    stats = getattr(summary, _SUMMARY_FIELD[slo.metric])
    value: float | None = getattr(stats, "median" if slo.percentile == "p50" else str(slo.percentile))
    if value is None:
        return None
    return value / 1000.0 if slo.metric == "e2e_s" else value


def judge(
    summary: ScenarioSummary,
    measured: Sequence[RequestRecord],
    rounds: Sequence[RoundResult],
    slos: Sequence[Slo],
    share: float,
) -> SloResult:
    """A scenario's SLO checks and goodput from its measured requests and summary."""
    per_request = [s for s in slos if s.percentile is None]
    good = [r for r in measured if meets(r, per_request)]
    total = len(measured)
    checks = []
    for slo in slos:
        if slo.percentile is None:
            held = sum(1 for r in measured if meets(r, [slo]))
            value = held / total if total else None
            checks.append(SloCheck(slo=slo, value=value, met=value is not None and value >= share))
        else:
            value = _percentile_value(summary, slo)
            checks.append(SloCheck(slo=slo, value=value, met=value is not None and value <= slo.limit))
    good_share = len(good) / total if total else 0.0
    duration = measured_duration_s(summary.mode, rounds, measured)
    met = total > 0 and good_share >= share and all(c.met for c in checks if c.slo.percentile is not None)
    return SloResult(
        checks=checks,
        good_requests=len(good),
        good_share=good_share,
        share_required=share,
        met=met,
        duration_s=duration,
        goodput_rps=len(good) / duration if duration > 0 else 0.0,
        goodput_tok_s=sum(r.completion_tokens or 0 for r in good) / duration if duration > 0 else 0.0,
        throughput_rps=sum(1 for r in measured if r.ok) / duration if duration > 0 else 0.0,
    )
