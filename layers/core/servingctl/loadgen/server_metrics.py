"""Cross-checks against the server's own Prometheus counters (vLLM `/metrics`).

Owns the text-format parsing (labels with escapes, +Inf/NaN, timestamps, junk lines skipped),
snapshots before/after a scenario summed over the label sets of the benchmarked model, the sampler
that runs beside the load (the peak of `vllm:num_requests_running`, and about once a second a
ServerSample of the gauges and counters for the metrics-over-time chart), and the verdicts. A
server without `/metrics` (managed APIs) gets checks marked unavailable, never failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import re
from dataclasses import dataclass, field

from servingctl.loadgen.backend import Backend
from servingctl.schema.results import ServerChecks, ServerSample

GENERATION = "vllm:generation_tokens_total"
PROMPT = "vllm:prompt_tokens_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
SPEC_DRAFT = "vllm:spec_decode_num_draft_tokens_total"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
# vLLM renamed the KV-cache gauge (gpu_cache_usage_perc until V1's kv_cache_usage_perc): read either.
KV_CACHE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
COUNTERS = (GENERATION, PROMPT, PREFIX_QUERIES, PREFIX_HITS, SPEC_DRAFT, SPEC_ACCEPTED)
TIMELINE_NAMES = frozenset({RUNNING, WAITING, *KV_CACHE, GENERATION, PROMPT, SPEC_DRAFT, SPEC_ACCEPTED})
# Scrapes cost the server CPU (vLLM renders every histogram), so sample gently; a peak seen in
# fewer samples than this is reported without a verdict (the scenario was too short to sample).
SAMPLE_INTERVAL_S = 0.1
MIN_RUNNING_SAMPLES = 5
# A long scenario needs no 10 scrapes a second (each wakes an idle client two or three times, which
# at low concurrency costs more than its streams do): after the first FAST_SCRAPES (a short
# scenario's peak check; a load planned to last long enough for MIN_RUNNING_SAMPLES slow ones twice
# over skips them) the pace slows to one per timeline interval.
FAST_SCRAPES = 10
# The metrics over time keep one scrape per interval, the slow ones due in its middle so that a
# late or early timer does not move a scrape into the next; a scrape unanswered this long is given
# up (the sampler must never hold the scenario up, even when the server stops answering).
TIMELINE_INTERVAL_S = 1.0
SCRAPE_TIMEOUT_S = 2.0

_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?\s*$")
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


@dataclass(frozen=True)
class Sample:
    """One exposition line: metric name, labels, value."""

    name: str
    labels: dict[str, str]
    value: float


def parse_prometheus(text: str, names: frozenset[str] | None = None) -> list[Sample]:
    """Samples of the Prometheus text format (only `names` when given); unparsable lines skipped."""
    # With names, one regex scan picks their lines: vLLM's page has thousands of histogram lines.
    lines = text.splitlines() if names is None else _lines_of(names).findall(text)
    samples: list[Sample] = []
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        name, raw_labels, raw_value = match.groups()
        if names is not None and name not in names:
            continue
        try:
            value = float(raw_value)
        except ValueError:
            continue
        labels = _parse_labels(raw_labels or "")
        if labels is None:
            continue
        samples.append(Sample(name, labels, value))
    return samples


@functools.cache
def _lines_of(names: frozenset[str]) -> re.Pattern[str]:
    """The lines that begin with one of `names`."""
    alternatives = "|".join(map(re.escape, sorted(names)))
    return re.compile(rf"^[ \t]*(?:{alternatives})(?![a-zA-Z0-9_:]).*$", re.M)


def _parse_labels(raw: str) -> dict[str, str] | None:
    labels: dict[str, str] = {}
    position = 0
    while position < len(raw):
        match = _LABEL.match(raw, position)
        if match is None:
            return None if raw[position:].strip() else labels
        labels[match.group(1)] = re.sub(r'\\[\\"n]', lambda m: _UNESCAPE[m.group(0)], match.group(2))
        position = match.end()
    return labels


def model_totals(samples: list[Sample], model: str) -> dict[str, float]:
    """Sum each metric over the label sets of `model` (samples without a model_name label count too)."""
    totals: dict[str, float] = {}
    for sample in samples:
        if sample.labels.get("model_name", model) != model or math.isnan(sample.value):
            continue
        totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


@dataclass
class Snapshot:
    """Counter totals at one moment, or why they could not be read."""

    totals: dict[str, float] = field(default_factory=dict)
    unavailable: str | None = None


class ServerMetrics:
    """Reads the server's counters for one model through the benchmark's backend."""

    def __init__(self, backend: Backend, model: str, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.backend = backend
        self.model = model
        self.interval_s = interval_s
        self.peak_running: int | None = None
        self.running_samples = 0
        self.timeline: list[ServerSample] = []

    async def snapshot(self) -> Snapshot:
        """Current totals of the checked counters for the model."""
        status, text = await self.backend.get_text("/metrics")
        if status != 200:
            return Snapshot(unavailable=f"no usable /metrics ({'HTTP ' + str(status) if status else text})")
        totals = model_totals(parse_prometheus(text, frozenset(COUNTERS)), self.model)
        if GENERATION not in totals:
            return Snapshot(unavailable=f"/metrics has no {GENERATION} for model {self.model!r}")
        return Snapshot(totals=totals)

    async def sample(self, stop: asyncio.Event, t0: int, planned_s: float | None = None) -> None:
        """Until `stop` is set, scrape /metrics (every interval_s for the first FAST_SCRAPES, then
        once per TIMELINE_INTERVAL_S): keep the peak of running requests, and the first answered
        scrape of each interval as a ServerSample (time relative to the scenario's `t0` on the
        backend's clock); `planned_s`, how long the load is planned to last, when known. A failed or
        unanswered scrape is skipped; the next one is tried at the usual pace."""
        long = planned_s is not None and planned_s >= 2 * MIN_RUNNING_SAMPLES * TIMELINE_INTERVAL_S
        fast = 1 if long else FAST_SCRAPES
        start = self.backend.clock()
        slot_ns = int(TIMELINE_INTERVAL_S * 1e9)
        kept_slot = -1
        scrapes = 0
        while not stop.is_set():
            try:
                status, text = await asyncio.wait_for(self.backend.get_text("/metrics"), SCRAPE_TIMEOUT_S)
            except TimeoutError:
                status, text = None, ""
            now = self.backend.clock()
            slot = (now - start) // slot_ns if slot_ns else scrapes
            if status == 200:
                totals = model_totals(parse_prometheus(text, TIMELINE_NAMES), self.model)
                if RUNNING in totals:
                    self.running_samples += 1
                    self.peak_running = max(self.peak_running or 0, int(totals[RUNNING]))
                if slot > kept_slot:
                    kept_slot = slot
                    self.timeline.append(server_sample(totals, now - t0))
            scrapes += 1
            next_slot_middle_s = (start + (slot + 1.5) * slot_ns - now) / 1e9
            interval = self.interval_s if scrapes < fast else max(self.interval_s, next_slot_middle_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)


def server_sample(totals: dict[str, float], t_ns: int) -> ServerSample:
    """One point of the metrics over time from a scrape's totals (the first KV-cache name found wins)."""
    kv = next((totals[name] for name in KV_CACHE if name in totals), None)
    return ServerSample(
        t_ns=t_ns,
        running=totals.get(RUNNING),
        waiting=totals.get(WAITING),
        kv_cache_usage=kv,
        prompt_tokens=totals.get(PROMPT),
        generation_tokens=totals.get(GENERATION),
        spec_draft_tokens=totals.get(SPEC_DRAFT),
        spec_accepted_tokens=totals.get(SPEC_ACCEPTED),
    )


def thinned(timeline: list[ServerSample], limit: int) -> list[ServerSample]:
    """At most `limit` samples evenly spread over the timeline, the first and last kept."""
    if len(timeline) <= limit:
        return timeline
    step = (len(timeline) - 1) / (limit - 1)
    return [timeline[round(i * step)] for i in range(limit)]


def build_checks(
    before: Snapshot,
    after: Snapshot,
    *,
    client_completion_tokens: int,
    client_prompt_tokens: int,
    salted: bool,
    peak_running: int | None,
    running_samples: int,
    intended_concurrency: int,
    exact_peak: bool,
) -> ServerChecks:
    """Verdicts from two snapshots and the client's own sums over the same requests.

    salted: every request carried a cache salt or nonce, so prefix-cache hits must be 0.
    exact_peak: the load held exactly `intended_concurrency` in flight (burst, sustained); for
    rate mode the concurrency is only a cap, so the peak must not exceed it.
    """
    unavailable = before.unavailable or after.unavailable
    if unavailable:
        return ServerChecks(available=False, reason=unavailable)

    def delta(name: str) -> float | None:
        if name in before.totals and name in after.totals:
            return after.totals[name] - before.totals[name]
        return None

    failures: list[str] = []
    generation = delta(GENERATION)
    generation_equal = generation == client_completion_tokens
    if not generation_equal:
        failures.append(
            f"server generated {generation:g} tokens, client counted {client_completion_tokens} "
            "(other traffic on the server, or tokens lost by the client)"
        )
    hits = delta(PREFIX_HITS)
    prefix_ok = None
    if salted and hits is not None:
        prefix_ok = hits == 0
        if not prefix_ok:
            failures.append(f"{hits:g} prefix-cache hit tokens despite per-request salts: results include cache reuse")
    draft, accepted = delta(SPEC_DRAFT), delta(SPEC_ACCEPTED)
    acceptance = accepted / draft if draft and accepted is not None else None
    peak_ok = None
    if peak_running is not None and running_samples >= MIN_RUNNING_SAMPLES:
        peak_ok = peak_running == intended_concurrency if exact_peak else peak_running <= intended_concurrency
        if not peak_ok:
            failures.append(
                f"peak running requests {peak_running} vs intended {intended_concurrency}"
                + (
                    " (server queues: max-num-seqs below the concurrency?)"
                    if peak_running < intended_concurrency
                    else " (other traffic on the server)"
                )
            )
    return ServerChecks(
        available=True,
        generation_tokens_delta=generation,
        client_completion_tokens=client_completion_tokens,
        generation_tokens_equal=generation_equal,
        prompt_tokens_delta=delta(PROMPT),
        client_prompt_tokens=client_prompt_tokens,
        prefix_cache_queries_delta=delta(PREFIX_QUERIES),
        prefix_cache_hits_delta=hits,
        prefix_cache_ok=prefix_ok,
        spec_decode_draft_tokens_delta=draft,
        spec_decode_accepted_tokens_delta=accepted,
        spec_decode_acceptance_rate=acceptance,
        peak_running=peak_running,
        running_samples=running_samples,
        intended_concurrency=intended_concurrency,
        peak_running_ok=peak_ok,
        failures=failures,
    )
