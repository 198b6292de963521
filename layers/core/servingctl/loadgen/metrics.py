"""Metric arithmetic: per-request figures from chunk timings, and per-scenario aggregates.

Definitions (n = completion tokens, times from the monotonic clock):
- TTFC = first chunk - send time, the empty role chunk included (what `vllm bench serve` calls TTFT).
- TTFT = first token-bearing chunk - send time (reasoning tokens count).
- TTFOT = first answer-content chunk - send time (for reasoning models: after the reasoning).
- E2E = end of stream - send time; E2E tok/s = n / E2E.
- decode tok/s = (n - k) / (t_last - t_first), k = the tokens that arrived at t_first (a multi-token
  prediction chunk carries k > 1); none when more than half of the request's chunk gaps were
  coalesced (see below); TPOT = (E2E - TTFT) / (n - 1).
- Chunks of one network read share its arrival stamp: the gaps between them are "coalesced" (the
  client cannot see when the server sent them), counted, and left out of ITL and chunk gaps.
- token-normalized ITL: each gap between reads divided by the tokens of the later read, one sample
  per token (so a 2-token MTP chunk gives two samples of half the gap).
- raw chunk gaps (between reads), and a histogram of tokens per chunk.
- burst output_tok_s (the headline throughput) = the median over measured rounds of a round's
  completion tokens / its wall time (first send to last end).
- steady-window output_tok_s (sustained, rate) = tokens of chunks arriving inside the window / its
  length, the window running from the first completion (ramp over) to the last send (drain begins).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import chain, compress, groupby
from operator import itemgetter, sub

from servingctl.loadgen.slo import judge
from servingctl.loadgen.stats import percentile, summarize
from servingctl.schema.results import (
    Calibration,
    ClientSelfCheck,
    MetricSummary,
    Mismatches,
    RequestRecord,
    RoundResult,
    RunConfig,
    ScenarioSummary,
    ServerChecks,
    SteadyWindow,
)

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
MAX_MISMATCH_EXAMPLES = 5


def with_request_metrics(record: RequestRecord) -> RequestRecord:
    """Return the record with ttft_ms, e2e_ms, e2e_tok_s, decode_tok_s and tpot_ms filled in."""
    update: dict[str, float | int | None] = {}
    n = record.completion_tokens or 0
    for name, t in (("ttfc_ms", record.t_first_chunk_ns), ("ttft_ms", record.t_first_ns), ("ttfot_ms", record.t_first_answer_ns)):
        if t is not None:
            update[name] = (t - record.t_start_ns) / NS_PER_MS
    if record.t_end_ns is not None:
        e2e_ns = record.t_end_ns - record.t_start_ns
        update["e2e_ms"] = e2e_ns / NS_PER_MS
        if e2e_ns > 0 and n > 0:
            update["e2e_tok_s"] = n * NS_PER_S / e2e_ns
    reads = per_read(record.chunks)
    coalesced = update["coalesced_gaps"] = len(record.chunks) - len(reads)
    if n >= 2 and record.t_first_ns is not None and record.t_last_ns is not None:
        decode_ns = record.t_last_ns - record.t_first_ns
        first = reads[0][1] if reads else 1
        # Past half the gaps inside shared reads, the reads came late and bunched: their span is the
        # client's schedule, not the server's pace (a loaded machine showed 77,965 tok/s at c=1).
        if decode_ns > 0 and n > first and 2 * coalesced <= len(record.chunks) - 1:
            update["decode_tok_s"] = (n - first) * NS_PER_S / decode_ns
        e2e_ms, ttft_ms = update.get("e2e_ms"), update.get("ttft_ms")
        if e2e_ms is not None and ttft_ms is not None:
            update["tpot_ms"] = (e2e_ms - ttft_ms) / (n - 1)
    return record.model_copy(update=update)


_stamp, _tokens = itemgetter(0), itemgetter(1)


def per_read(chunks: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Token chunks merged per network read (the chunks of one read share its arrival stamp)."""
    if len({t for t, _ in chunks}) == len(chunks):  # the common case, one chunk per read: a set in C, no loop
        return list(chunks)
    # Grouped and summed in C, a Python step per read, not per chunk (a flood read holds hundreds).
    return [(t, sum(map(_tokens, read))) for t, read in groupby(chunks, _stamp)]


def read_gaps_ns(chunks: Sequence[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """Gaps between the network reads that brought token-bearing chunks (ns), and the tokens of
    the later read of each gap; subtracted in C, as a paced request has one read per token."""
    reads = per_read(chunks)
    stamps = list(map(_stamp, reads))
    return list(map(sub, stamps[1:], stamps[:-1])), list(map(_tokens, reads[1:]))


def chunk_gaps_ms(chunks: Sequence[tuple[int, int]]) -> list[float]:
    """Raw gaps between the network reads that brought token-bearing chunks, in ms."""
    return list(map(NS_PER_MS.__rtruediv__, read_gaps_ns(chunks)[0]))


def itl_samples_ms(chunks: Sequence[tuple[int, int]]) -> list[float]:
    """Token-normalized inter-token latencies: gap between reads / tokens of the later read, once per token."""
    return _itl_ms(*read_gaps_ns(chunks))


def _itl_ms(gaps_ns: list[int], tokens: list[int]) -> list[float]:
    """ITL samples of one request from its read gaps and the tokens of each later read."""
    if tokens.count(1) == len(tokens):  # one token per read (no MTP): the samples are the raw gaps
        return list(map(NS_PER_MS.__rtruediv__, gaps_ns))
    samples: list[float] = []
    for gap, k in zip(gaps_ns, tokens, strict=False):
        if k:  # a read of no tokens gives no sample
            samples.extend([gap / NS_PER_MS / k] * k)
    return samples


def gap_summaries(records: Iterable[RequestRecord]) -> tuple[MetricSummary, MetricSummary]:
    """Token-normalized ITL and raw chunk gaps over records, each request's reads merged once.

    A gap before a one-token read is a raw gap and an ITL sample alike, so those are sorted once;
    only the gaps before multi-token reads (MTP, coalesced) are kept apart, in Python."""
    ones: list[float] = []  # gaps before a one-token read, in ms
    multi: list[float] = []  # gaps before a read of any other token count
    split: list[float] = []  # their ITL samples: gap / k, k times each
    for record in records:
        gaps_ns, tokens = read_gaps_ns(record.chunks)
        ms = list(map(NS_PER_MS.__rtruediv__, gaps_ns))
        if tokens.count(1) == len(tokens):
            ones += ms
            continue
        ones += compress(ms, map((1).__eq__, tokens))
        for gap, k in compress(zip(ms, tokens, strict=False), map((1).__ne__, tokens)):
            multi.append(gap)
            if k:
                split += [gap / k] * k
    ones.sort()  # the sorts in summarize then only merge a short tail into this run
    return summarize(ones + split), summarize(ones + multi)


def unmeasured(ok: Sequence[RequestRecord]) -> list[str]:
    """What the successful requests could not measure, and why (instead of a bare empty figure)."""
    found = []
    bunched = sum(1 for r in ok if (r.completion_tokens or 0) >= 2 and r.decode_tok_s is None)
    if bunched:
        found.append(
            f"decode_tok_s: {bunched} of {len(ok)} requests got all their tokens in one network read, or more "
            "than half of their chunk gaps coalesced (the client read late, or the server flushed them at once): "
            "no decode rate for them"
        )
    coalesced = sum(r.coalesced_gaps for r in ok)
    if coalesced:
        gaps = sum(max(len(r.chunks) - 1, 0) for r in ok)
        found.append(
            f"itl_ms: {coalesced} of {gaps} chunk gaps fell inside one network read (coalesced): "
            "their timing is unknown, left out of ITL and chunk gaps"
        )
    no_answer = sum(1 for r in ok if r.t_first_ns is not None and r.t_first_answer_ns is None)
    if no_answer:
        found.append(f"ttfot_ms: {no_answer} of {len(ok)} requests ended before any answer token (reasoning only)")
    return found


def tokens_per_chunk(records: Iterable[RequestRecord]) -> dict[int, int]:
    """Histogram: tokens carried by a chunk -> how many chunks carried that many."""
    counts: Counter[int] = Counter(map(_tokens, chain.from_iterable(record.chunks for record in records)))  # in C
    return dict(sorted(counts.items()))


def check_mismatches(record: RequestRecord, prompt_tokens: int | None, max_tokens: int) -> RequestRecord:
    """Flag a finished request whose usage disagrees with the calibration or with max_tokens
    (prompt_tokens None: a dataset prompt /tokenize did not count, not checked)."""
    found = []
    if record.prompt_tokens is not None and prompt_tokens is not None and record.prompt_tokens != prompt_tokens:
        found.append("prompt_tokens")
    if record.completion_tokens != max_tokens:
        found.append("completion_tokens")
    if record.finish_reason != "length":
        found.append("finish_reason")
    return record.model_copy(update={"mismatches": found}) if found else record


def count_mismatches(records: Iterable[RequestRecord], prompt_tokens: int, max_tokens: int) -> Mismatches:
    """Count flagged requests per kind, with a few readable examples."""
    counts: Counter[str] = Counter()
    examples: list[str] = []
    for record in records:
        counts.update(record.mismatches)
        if record.mismatches and len(examples) < MAX_MISMATCH_EXAMPLES:
            examples.append(
                f"request {record.index}: prompt_tokens {record.prompt_tokens} (calibrated {prompt_tokens}), "
                f"completion_tokens {record.completion_tokens} (max_tokens {max_tokens}), "
                f"finish_reason {record.finish_reason!r}"
            )
    return Mismatches(examples=examples, **counts)


def round_result(index: int, warmup: bool, records: Sequence[RequestRecord]) -> RoundResult:
    """One burst round: tokens of its successful requests over first send -> last end."""
    t_start = min(r.t_start_ns for r in records)
    t_end = max((r.t_end_ns if r.t_end_ns is not None else r.t_start_ns) for r in records)
    ok = [r for r in records if r.ok]
    tokens = sum(r.completion_tokens or 0 for r in ok)
    wall_ns = t_end - t_start
    return RoundResult(
        index=index,
        warmup=warmup,
        t_start_ns=t_start,
        t_end_ns=t_end,
        completion_tokens=tokens,
        ok=len(ok),
        failed=len(records) - len(ok),
        output_tok_s=tokens * NS_PER_S / wall_ns if ok and wall_ns > 0 else None,
    )


def steady_window(records: Sequence[RequestRecord]) -> SteadyWindow | None:
    """The steady window of a sustained or rate scenario (measured requests) and its token count."""
    ended = [r.t_end_ns for r in records if r.t_end_ns is not None]
    if not ended:
        return None
    warnings: list[str] = []
    start = min(ended)  # first completion: every slot has been through prefill and decode once
    end = max(r.t_start_ns for r in records)  # last send: from here on fewer requests are in flight
    method = "first completion -> last send"
    if end <= start:
        # Too few requests per slot for a steady phase: fall back to the whole span, loudly.
        start = min(r.t_start_ns for r in records)
        end = max(ended)
        method = "whole span (no steady phase)"
        warnings.append("no steady phase: send more requests than 2 x concurrency; ramp and drain are included")
    tokens = sum(_tokens_between(r.chunks, start, end) for r in records if r.ok)
    if any(r.ok and not r.token_counts_exact for r in records):
        warnings.append("approximate per-chunk token counts (server sent no continuous usage stats)")
    return SteadyWindow(
        t_start_ns=start,
        t_end_ns=end,
        duration_s=(end - start) / NS_PER_S,
        completion_tokens=tokens,
        method=method,
        warnings=warnings,
    )


def completion_rate(records: Sequence[RequestRecord]) -> float | None:
    """Successful measured requests completed per second, first to last completion (None under two):
    arrivals the server keeps up with leave at the rate they came."""
    ends = sorted(r.t_end_ns for r in records if r.ok and not r.warmup and r.t_end_ns is not None)
    if len(ends) < 2 or ends[-1] <= ends[0]:
        return None
    return (len(ends) - 1) * NS_PER_S / (ends[-1] - ends[0])


def _tokens_between(chunks: Sequence[tuple[int, int]], start: int, end: int) -> int:
    """Tokens of the chunks stamped in [start, end]: a request wholly inside or outside is summed in C."""
    if not chunks:
        return 0
    stamps = list(map(_stamp, chunks))
    first, last = min(stamps), max(stamps)
    if start <= first and last <= end:
        return sum(map(_tokens, chunks))
    if last < start or first > end:
        return 0
    return sum(tokens for t, tokens in chunks if start <= t <= end)


MAX_EXAMPLE_CHARS = 200


def failure_message(record: RequestRecord) -> str:
    """A failed request's reason in one line: 'HTTP 503: {"error": ...}', cut at MAX_EXAMPLE_CHARS."""
    message = " ".join((record.error or "").split())
    if record.http_status is not None and not message.startswith("HTTP "):  # the status of a stream cut later
        message = f"HTTP {record.http_status}" + (f", {message}" if message else "")
    text = message or "no message"
    return text if len(text) <= MAX_EXAMPLE_CHARS else text[: MAX_EXAMPLE_CHARS - 1] + "…"


def failure_words(s: ScenarioSummary) -> str:
    """'4 of 4 failed (100.0%): http_status 4 (e.g. HTTP 503: ...)': each kind, its count and one message."""
    kinds = ", ".join(
        f"{kind} {n}" + (f" (e.g. {s.failure_examples[kind]})" if kind in s.failure_examples else "")
        for kind, n in sorted(s.failures_by_kind.items())
    )
    return f"{s.failed} of {s.requests} failed ({s.failure_rate:.1%}): {kinds}"


def _values(records: Iterable[RequestRecord], field: str) -> list[float]:
    return [value for record in records if (value := getattr(record, field)) is not None]


def scenario_summary(
    *,
    name: str,
    config: RunConfig,
    calibration: Calibration,
    concurrency: int,
    records: Sequence[RequestRecord],
    rounds: Sequence[RoundResult],
    server: ServerChecks,
    client: ClientSelfCheck,
) -> ScenarioSummary:
    """Headline numbers of a scenario from its records (warm-ups excluded) and checks."""
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.ok]
    failures = Counter(r.error_kind or "other" for r in measured if not r.ok)
    examples: dict[str, str] = {}
    for r in measured:
        if not r.ok:
            examples.setdefault(r.error_kind or "other", failure_message(r))
    round_rates = [r.output_tok_s for r in rounds if not r.warmup and r.output_tok_s is not None]
    window = None
    achieved_rate = None
    if config.mode == "burst":
        aggregate = percentile(sorted(round_rates), 0.5) if round_rates else None
    else:
        window = steady_window(measured)
        aggregate = window.completion_tokens / window.duration_s if window and window.duration_s > 0 else None
        starts = sorted(r.t_start_ns for r in measured)
        if config.mode == "rate" and len(starts) > 1 and starts[-1] > starts[0]:
            achieved_rate = (len(starts) - 1) * NS_PER_S / (starts[-1] - starts[0])
    itl_ms, chunk_gap_ms = gap_summaries(ok)
    summary = ScenarioSummary(
        name=name,
        input_tokens_target=calibration.target_tokens,
        input_tokens=calibration.actual_tokens,
        concurrency=concurrency,
        mode=config.mode,
        rate=config.rate,
        max_tokens=config.max_tokens,
        requests=len(measured),
        ok=len(ok),
        failed=len(measured) - len(ok),
        failures_by_kind=dict(sorted(failures.items())),
        failure_examples=dict(sorted(examples.items())),
        failure_rate=(len(measured) - len(ok)) / len(measured) if measured else 0.0,
        output_tok_s=aggregate,
        rounds_output_tok_s=round_rates,
        steady_window=window,
        achieved_rate_rps=achieved_rate,
        ttfc_ms=summarize(_values(ok, "ttfc_ms")),
        ttft_ms=summarize(_values(ok, "ttft_ms")),
        ttfot_ms=summarize(_values(ok, "ttfot_ms")),
        e2e_ms=summarize(_values(ok, "e2e_ms")),
        e2e_tok_s=summarize(_values(ok, "e2e_tok_s")),
        decode_tok_s=summarize(_values(ok, "decode_tok_s")),
        tpot_ms=summarize(_values(ok, "tpot_ms")),
        itl_ms=itl_ms,
        chunk_gap_ms=chunk_gap_ms,
        coalesced_gaps=sum(r.coalesced_gaps for r in ok),
        chunk_gaps=sum(max(len(r.chunks) - 1, 0) for r in ok),
        unmeasured=unmeasured(ok),
        tokens_per_chunk=tokens_per_chunk(ok),
        token_counts_exact=bool(ok) and all(r.token_counts_exact for r in ok),
        mismatches=count_mismatches(ok, calibration.actual_tokens, config.max_tokens),
        server=server,
        client=client,
        client_bound=client.client_bound,
    )
    if config.slos:
        summary.slo = judge(summary, measured, rounds, config.slos, config.slo_share)
    return summary
