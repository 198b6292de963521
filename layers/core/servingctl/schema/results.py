"""The one versioned benchmark results schema (pydantic): run config, calibration, per-request
records, per-scenario summaries and checks, and the run result that outputs and storage consume.

Times inside a scenario are integer nanoseconds of a monotonic clock, relative to the scenario's
start (`ScenarioResult.t0_wall` anchors them to wall-clock time). Derived figures are in ms and
tokens per second. Bump SCHEMA_VERSION on any incompatible change.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from servingctl.schema.comparison import SloCost
from servingctl.schema.renamed import under_new_names

SCHEMA_VERSION: Literal[1] = 1

Mode = Literal["burst", "sustained", "rate"]
Arrivals = Literal["poisson", "constant"]
# The OpenAI API requests go to: /v1/chat/completions (messages) or /v1/completions (a prompt).
Api = Literal["chat", "completions"]
APIS: tuple[str, ...] = ("chat", "completions")
ARRIVALS: tuple[str, ...] = ("poisson", "constant")
SaltMode = Literal["cache-salt", "prompt-nonce", "none"]
CalibrationMethod = Literal["tokenize", "usage", "dataset"]
DatasetFormat = Literal["sharegpt", "jsonl", "csv"]
DATASET_FORMATS: tuple[str, ...] = ("sharegpt", "jsonl", "csv")
# Where a dataset request's output length comes from: the run's max_tokens, or the dataset (ShareGPT:
# the reference answer's tokens; JSONL/CSV: its output_tokens field, max_tokens where a row has none).
OutputLengthFrom = Literal["max-tokens", "dataset"]
OUTPUT_LENGTH_FROM: tuple[str, ...] = ("max-tokens", "dataset")
LengthKind = Literal["fixed", "uniform", "normal"]
LENGTH_KINDS: tuple[str, ...] = ("fixed", "uniform", "normal")
MAX_LENGTH_TOKENS = 262_144
MAX_WARMUP_S = 3600.0  # warm-up by time: at most an hour of load before measuring
# Why a request failed. Mismatches of token counts are not failures: see RequestRecord.mismatches.
ErrorKind = Literal["http_status", "timeout", "connect", "stream_cut", "malformed_sse", "server_error", "other"]
MismatchKind = Literal["prompt_tokens", "completion_tokens", "finish_reason"]

SloMetric = Literal["ttft_ms", "itl_ms", "e2e_s"]
SloPercentile = Literal["p50", "p90", "p95", "p99"]

MODES: tuple[str, ...] = ("burst", "sustained", "rate")
SLO_METRICS: tuple[str, ...] = ("ttft_ms", "itl_ms", "e2e_s")
SLO_PERCENTILES: tuple[str, ...] = ("p50", "p90", "p95", "p99")
SALT_MODES: tuple[str, ...] = ("cache-salt", "prompt-nonce", "none")
# Header values never written to results (compared lower-case).
SECRET_HEADERS: frozenset[str] = frozenset({"authorization", "x-api-key", "api-key", "proxy-authorization"})
REDACTED = "<redacted>"
# The headline throughput, one figure under one name (`output_tok_s`) everywhere it is shown; it was
# stored as aggregate_tok_s (and its rounds as aggregate_tok_s_rounds) before: those documents still load.
RENAMED_THROUGHPUT = {"aggregate_tok_s": "output_tok_s", "aggregate_tok_s_rounds": "rounds_output_tok_s"}
OUTPUT_TOK_S = (
    "output tokens per second: burst = the median of the measured rounds' rates (each round's output tokens / "
    "its wall time); sustained/rate = output tokens of the steady window / its length"
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Slo(_Model):
    """One latency objective. Without a percentile every request is judged on its own (vLLM's
    --goodput): ttft_ms its TTFT, itl_ms its TPOT (vLLM's tpot), e2e_s its end-to-end time. With one,
    the scenario's percentile of the metric is judged (itl_ms: the token-normalized ITL samples)."""

    metric: SloMetric
    limit: float = Field(gt=0, description="upper bound, in the metric's unit (ms or s)")
    percentile: SloPercentile | None = Field(None, description="None: per request")

    def label(self) -> str:
        """As typed on the command line: ttft_ms=500 or ttft_ms:p90=500."""
        return f"{self.metric}{':' + self.percentile if self.percentile else ''}={self.limit:g}"


class LengthDistribution(_Model):
    """Per-request token lengths drawn from a seeded distribution: fixed (tokens), uniform over
    low..high inclusive, or normal (mean, sd) rounded and clipped to 1..MAX_LENGTH_TOKENS."""

    kind: LengthKind
    tokens: int | None = Field(None, ge=1, le=MAX_LENGTH_TOKENS, description="fixed")
    low: int | None = Field(None, ge=1, le=MAX_LENGTH_TOKENS, description="uniform: smallest length")
    high: int | None = Field(None, ge=1, le=MAX_LENGTH_TOKENS, description="uniform: largest length")
    mean: float | None = Field(None, ge=1, le=MAX_LENGTH_TOKENS, description="normal")
    sd: float | None = Field(None, ge=0, le=MAX_LENGTH_TOKENS, description="normal: standard deviation")

    @model_validator(mode="after")
    def _fields_of_kind(self) -> LengthDistribution:
        needs = {"fixed": ("tokens",), "uniform": ("low", "high"), "normal": ("mean", "sd")}[self.kind]
        extra = [f for f in ("tokens", "low", "high", "mean", "sd") if f not in needs and getattr(self, f) is not None]
        missing = [f for f in needs if getattr(self, f) is None]
        if missing or extra:
            raise ValueError(f"{self.kind}: takes {', '.join(needs)} (missing {missing or 'none'}; extra {extra or 'none'})")
        if self.kind == "uniform" and self.low is not None and self.high is not None and self.low > self.high:
            raise ValueError(f"uniform: low {self.low} is above high {self.high}")
        return self

    def label(self) -> str:
        """As typed on the command line: fixed:256, uniform:128:1024 or normal:512:64."""
        if self.kind == "fixed":
            return f"fixed:{self.tokens}"
        if self.kind == "uniform":
            return f"uniform:{self.low}:{self.high}"
        return f"normal:{self.mean:g}:{self.sd:g}"

    def short(self) -> str:
        """For scenario names: 256, 128-1024 or 512sd64."""
        if self.kind == "fixed":
            return f"{self.tokens}"
        if self.kind == "uniform":
            return f"{self.low}-{self.high}"
        return f"{self.mean:g}sd{self.sd:g}"


class DatasetSpec(_Model):
    """A prompts file to send instead of synthetic prompts: where it is, its format (None: detected
    from the content), how many prompts to take from its start, and where output lengths come from."""

    source: str = Field(min_length=1, description="a local path (CLI) or s3://bucket/key (a run inside the VPC)")
    format: DatasetFormat | None = Field(None, description="sharegpt, jsonl or csv; None: detected from the content")
    num_prompts: int | None = Field(None, ge=1, description="take the first N prompts (None: all; conversations: the first N)")
    output_tokens: OutputLengthFrom = "max-tokens"
    multi_turn: bool = Field(False, description="ShareGPT: an entry's turns as one conversation (JSONL, CSV: conversation_id)")


class DatasetFingerprint(_Model):
    """Which prompts a run sent: the file's sha256, its detected format and how many prompts were used."""

    source: str
    format: DatasetFormat
    sha256: str = Field(description="of the file's bytes as read")
    prompts: int = Field(description="prompts taken (the first N)")
    entries: int = Field(description="usable entries in the file")
    skipped: int = Field(0, description="entries skipped as `vllm bench serve` skips them (ShareGPT: fewer than two turns)")
    output_tokens: OutputLengthFrom = "max-tokens"


class RunConfig(_Model):
    """What the user asked for. The API key itself is never stored: only whether one was set."""

    # Target and identity.
    endpoint: str = Field(description="base URL, e.g. http://alb.internal (a trailing /v1 is accepted)")
    model: str = Field(min_length=1, description="served model name sent in requests")
    headers: dict[str, str] = Field(default_factory=dict, description="extra headers; secrets redacted")
    api_key_set: bool = False
    api: Api = Field(default="chat", description="chat: /v1/chat/completions; completions: /v1/completions (no chat template)")
    # Scenario matrix.
    input_tokens: list[int] = Field(default_factory=lambda: [256, 2048, 8192], min_length=1)
    concurrencies: list[int] = Field(default_factory=lambda: [1, 2, 4], min_length=1)
    mode: Mode = "burst"
    rate: float | None = Field(default=None, gt=0, description="requests/s for mode rate")
    rates: list[float] | None = Field(
        default=None,
        min_length=2,
        max_length=16,
        description="mode rate: a sweep, one scenario per rate (each scenario's own in rate)",
    )
    arrivals: Arrivals = Field(default="poisson", description="mode rate: Poisson arrivals (seeded) or constant gaps of 1/rate")
    # Load shape: burst uses warmup + rounds; sustained/rate use requests and/or duration_s.
    warmup: int = Field(default=2, ge=0, description="warm-up rounds of C requests (every mode); 0 with warmup_s")
    warmup_s: float | None = Field(
        default=None,
        gt=0,
        le=MAX_WARMUP_S,
        description="warm-up by time instead of rounds: seconds of load before measuring (burst: rounds of C until "
        "then; sustained: C in flight; rate: the rate's arrivals); None: warm-up rounds",
    )
    rounds: int = Field(default=5, ge=1, description="measured rounds (burst)")
    requests: int | None = Field(default=None, ge=1, description="measured requests (sustained, rate)")
    duration_s: float | None = Field(default=None, gt=0, description="dispatch deadline (sustained, rate)")
    # Request body and checks.
    max_tokens: int = Field(default=256, ge=1)
    # The user's own prompts, or per-request length distributions, instead of fixed synthetic lengths.
    dataset: DatasetSpec | None = None
    think_time_s: float = Field(default=0.0, ge=0, le=3600, description="conversations: pause between a reply and the next turn")
    replay_speed: float | None = Field(
        default=None, gt=0, le=1000, description="send a dataset's requests at its timestamps divided by this (None: no replay)"
    )
    input_distribution: LengthDistribution | None = Field(None, description="per-request prompt lengths (replaces input_tokens)")
    output_distribution: LengthDistribution | None = Field(None, description="per-request output lengths (replaces max_tokens)")
    seed: int = 42
    salt_mode: SaltMode = "cache-salt"
    max_failure_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    timeout_s: float = Field(default=600.0, gt=0, description="per-request timeout")
    # Service-level objectives: goodput counts requests meeting every per-request SLO.
    slos: list[Slo] = Field(default_factory=list, description="latency objectives (empty: no goodput)")
    slo_share: float = Field(
        default=1.0, gt=0, le=1, description="share of measured requests that must meet every per-request SLO"
    )
    # Saturation sweep: search the highest concurrency (mode rate: arrival rate) meeting the SLOs
    # instead of a fixed grid.
    sweep: bool = False
    sweep_max_concurrency: int = Field(default=256, ge=1, le=4096, description="highest concurrency the sweep may try")
    sweep_max_steps: int = Field(default=12, ge=2, le=40, description="most scenarios the sweep may run")
    sweep_start_rate: float = Field(default=1.0, gt=0, le=10_000, description="a rate sweep's first rate (requests/s)")
    sweep_max_rate: float = Field(default=1000.0, gt=0, le=10_000, description="highest rate a rate sweep may try")
    sweep_resolution: float = Field(
        default=0.1, ge=0.01, le=1.0, description="a rate sweep stops bisecting once missed / met is at most 1 + this"
    )

    def warmup_label(self) -> str:
        """The warm-up as --warmup takes it: rounds (2) or seconds of load (30s)."""
        return str(self.warmup) if self.warmup_s is None else f"{self.warmup_s:g}s"

    @field_validator("endpoint")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} must start with http:// or https://")
        return value

    @field_validator("input_tokens", "concurrencies")
    @classmethod
    def _positive(cls, values: list[int]) -> list[int]:
        if any(v < 1 for v in values):
            raise ValueError("every value must be a positive integer")
        return values

    @field_validator("headers")
    @classmethod
    def _redact(cls, headers: dict[str, str]) -> dict[str, str]:
        return {k: (REDACTED if k.lower() in SECRET_HEADERS else v) for k, v in headers.items()}

    @model_validator(mode="after")
    def _mode_needs(self) -> RunConfig:
        if self.mode == "rate" and self.rate is None and not self.rates and not self.sweep:
            raise ValueError("rate: required in mode rate (the arrival rate in requests per second)")
        if self.rates is not None and (self.mode != "rate" or any(r <= 0 for r in self.rates)):
            raise ValueError(f"rates: a sweep of arrival rates above 0 in mode rate; got {self.rates} in mode {self.mode}")
        if self.mode in ("sustained", "rate") and self.requests is None and self.duration_s is None and self.dataset is None:
            raise ValueError(f"requests or duration_s: mode {self.mode} needs one of them (with a dataset: every prompt once)")
        if self.warmup_s is not None and self.warmup:
            raise ValueError(
                f"warmup, warmup_s: warm-up by rounds or by time, not both (warmup {self.warmup}, warmup_s {self.warmup_s:g})"
            )
        seen = [(slo.metric, slo.percentile) for slo in self.slos]
        if len(set(seen)) != len(seen):
            raise ValueError("slos: each metric and percentile at most once")
        if self.dataset is not None and self.input_distribution is not None:
            raise ValueError("dataset, input_distribution: the prompts come from the dataset or the distribution; give one")
        if (self.dataset is not None or self.input_distribution is not None) and self.salt_mode == "prompt-nonce":
            raise ValueError(
                "salt_mode: prompt-nonce changes the prompts' lengths; allowed with a dataset or distribution: cache-salt, none"
            )
        if self.replay_speed is not None and (self.dataset is None or self.mode != "sustained"):
            raise ValueError("replay_speed: replays a dataset's timestamps; needs a dataset and mode sustained (its default)")
        varying = [f for f in ("dataset", "input_distribution", "output_distribution") if getattr(self, f) is not None]
        if self.sweep and varying:
            raise ValueError(f"sweep: searches with the fixed synthetic prompts; not with {', '.join(varying)}")
        if self.sweep:
            if not self.slos:
                raise ValueError("slos: the sweep searches the highest concurrency meeting an SLO; give at least one")
            if len(self.input_tokens) != 1:
                raise ValueError(f"input_tokens: the sweep searches one input length; got {len(self.input_tokens)}")
            if self.mode == "rate":
                self._rate_sweep_needs()
        return self

    def _rate_sweep_needs(self) -> None:
        """A rate sweep chooses its rates and caps requests in flight with one concurrency."""
        if self.rate is not None or self.rates is not None:
            raise ValueError("rate: a rate sweep chooses its rates (from sweep_start_rate up to sweep_max_rate); drop it")
        if len(self.concurrencies) != 1:
            raise ValueError(
                f"concurrencies: a rate sweep caps requests in flight with one value, e.g. 64; got {self.concurrencies}"
            )
        if self.sweep_start_rate > self.sweep_max_rate:
            raise ValueError(
                f"sweep_start_rate: {self.sweep_start_rate:g} is above sweep_max_rate {self.sweep_max_rate:g}; "
                "allowed: at most sweep_max_rate"
            )


class Calibration(_Model):
    """Prompt sized for one target: repetitions of `unit` give `actual_tokens` after the chat template.
    Method dataset: the prompts came from a file or a length distribution, each request checked against
    its own count; target and actual are then the mean prompt tokens (repetitions 0, unit empty)."""

    target_tokens: int
    actual_tokens: int
    repetitions: int
    method: CalibrationMethod
    unit: str = Field(description="the repeated text")
    nonce_tokens: int | None = Field(default=None, description="salt-mode prompt-nonce: tokens of the nonce prefix included")
    probes: int = Field(default=0, description="tokenize calls or probe requests spent")
    warnings: list[str] = Field(default_factory=list)


class RequestRecord(_Model):
    """One streamed chat completion as the client saw it."""

    # Identity within the run.
    scenario: str
    round: int = Field(description="burst: round index within its phase; other modes: 0")
    index: int = Field(description="request index within the scenario (warm-ups first)")
    warmup: bool = False
    # Outcome.
    ok: bool
    error_kind: ErrorKind | None = None
    error: str | None = None
    http_status: int | None = None
    # Monotonic ns relative to the scenario start: sent, first token chunk, last token chunk, done.
    t_start_ns: int
    t_first_chunk_ns: int | None = Field(None, description="first chunk with choices, even the empty role chunk (vLLM's TTFT)")
    t_first_ns: int | None = None
    t_first_answer_ns: int | None = Field(None, description="first chunk with answer content (after any reasoning)")
    t_last_ns: int | None = None
    t_end_ns: int | None = None
    # Server-reported usage and end of generation.
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    mismatches: list[MismatchKind] = Field(default_factory=list)
    # Token-bearing chunks: (arrival ns relative to scenario start, tokens it carried).
    chunks: list[tuple[int, int]] = Field(default_factory=list)
    token_counts_exact: bool = Field(False, description="per-chunk counts from continuous usage stats; else 1 per content chunk")
    malformed_lines: int = 0
    # Derived per-request metrics (None when not computable, e.g. one token or a failure).
    ttfc_ms: float | None = Field(None, description="time to first chunk, as vLLM's bench counts TTFT")
    ttft_ms: float | None = None
    ttfot_ms: float | None = Field(None, description="time to first answer token (reasoning models: after the reasoning)")
    e2e_ms: float | None = None
    e2e_tok_s: float | None = None
    decode_tok_s: float | None = Field(None, description="(n - k) / (t_last - t_first), k = tokens that arrived with the first")
    tpot_ms: float | None = None
    coalesced_gaps: int = Field(0, description="gaps between token chunks that arrived in one network read")


class MetricSummary(_Model):
    """Distribution of one metric. Percentiles: linear interpolation between order statistics
    (numpy's default); a warning names each percentile with too few samples to resolve it."""

    count: int = 0
    min: float | None = None
    mean: float | None = None
    median: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None
    warnings: list[str] = Field(default_factory=list)


class RoundResult(_Model):
    """One burst round (C requests released together): output_tok_s = its completion tokens / wall time."""

    index: int
    warmup: bool
    t_start_ns: int
    t_end_ns: int
    completion_tokens: int
    ok: int
    failed: int
    output_tok_s: float | None = Field(description="this round's output tokens / its wall time (first send to last end)")

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data: Any) -> Any:
        return under_new_names(data, RENAMED_THROUGHPUT)


class SteadyWindow(_Model):
    """Sustained/rate: the interval output_tok_s is measured in (ramp and drain excluded) and why."""

    t_start_ns: int
    t_end_ns: int
    duration_s: float
    completion_tokens: int = Field(description="tokens of chunks arriving inside the window")
    method: str
    warnings: list[str] = Field(default_factory=list)


class Mismatches(_Model):
    """Requests whose usage disagreed with what was asked (counts over measured requests)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: int = 0
    examples: list[str] = Field(default_factory=list, description="a few readable cases")


class ServerChecks(_Model):
    """Cross-checks against the server's Prometheus counters (deltas over the whole scenario,
    warm-ups included). A check is None when the server does not expose what it needs."""

    available: bool
    reason: str | None = Field(None, description="why checks are unavailable (e.g. no /metrics)")
    # Generated tokens: the server's counter delta must equal the client's sum of usage.
    generation_tokens_delta: float | None = None
    client_completion_tokens: int | None = None
    generation_tokens_equal: bool | None = None
    prompt_tokens_delta: float | None = None
    client_prompt_tokens: int | None = None
    # Prefix cache: with salts or nonces the hits must stay 0; salt-mode none is not checked.
    prefix_cache_queries_delta: float | None = None
    prefix_cache_hits_delta: float | None = None
    prefix_cache_ok: bool | None = None
    # Speculative decoding: accepted / draft tokens.
    spec_decode_draft_tokens_delta: float | None = None
    spec_decode_accepted_tokens_delta: float | None = None
    spec_decode_acceptance_rate: float | None = None
    # Peak of vllm:num_requests_running sampled during the scenario vs the intended concurrency.
    peak_running: int | None = None
    running_samples: int | None = Field(None, description="scrapes behind peak_running; too few -> no verdict")
    intended_concurrency: int | None = None
    peak_running_ok: bool | None = None
    failures: list[str] = Field(default_factory=list, description="readable reasons of failed checks")


class ClientSelfCheck(_Model):
    """Was the client itself the bottleneck? Event-loop lag and process CPU during the scenario."""

    loop_lag_ms: MetricSummary
    cpu_seconds: float
    wall_seconds: float
    cpu_share: float = Field(description="process CPU seconds / wall seconds (1.0 = one core busy)")
    lag_p99_limit_ms: float
    cpu_share_limit: float
    client_bound: bool = Field(description="the client's own CPU set the pace: its figures are the client's limit")
    reasons: list[str] = Field(default_factory=list, description="why client_bound")
    host_busy: bool = Field(
        False, description="the event loop woke late while the client itself was not busy: the machine was (timings late)"
    )
    host_reasons: list[str] = Field(default_factory=list, description="why host_busy, with the machine's load")
    run_queue_wait_s: float | None = Field(None, description="seconds the event loop's thread waited for a CPU (Linux schedstat)")
    steal_share: float | None = Field(None, description="share of the machine's CPU time its hypervisor stole (Linux /proc/stat)")
    load_average: float | None = Field(None, description="the machine's 1-minute load average when the scenario ended")
    processes: int = Field(
        1, ge=1, description="client processes the scenario's streams were spread over (the busiest one's figures)"
    )


class SloCheck(_Model):
    """One SLO judged on a scenario: per request, the share of measured requests meeting it; with a
    percentile, the scenario's value of that percentile."""

    slo: Slo
    value: float | None = Field(description="per request: share meeting it (0..1); percentile: the measured value")
    met: bool


class SloResult(_Model):
    """A scenario against the run's SLOs, and its goodput: requests (and their output tokens) that
    met every per-request SLO, per second of the measured duration (vLLM's request_goodput)."""

    checks: list[SloCheck]
    good_requests: int = Field(description="measured requests meeting every per-request SLO (failed requests never do)")
    good_share: float = Field(description="good_requests / measured requests")
    share_required: float
    met: bool = Field(description="good_share >= share_required and every percentile SLO held")
    duration_s: float = Field(description="burst: sum of measured rounds' wall time; else first send to last end")
    goodput_rps: float = Field(description="good requests / duration_s")
    goodput_tok_s: float = Field(
        description="output tokens of the good requests / duration_s (a total over time, not output_tok_s's median of rounds)"
    )
    throughput_rps: float = Field(description="every successful request (good or not) / duration_s: requests, not tokens")


class ScenarioSummary(_Model):
    """Headline numbers of one scenario (one input length x one concurrency x one mode)."""

    # Identity.
    name: str = Field(description="e.g. in256-c4")
    input_tokens_target: int
    input_tokens: int = Field(description="calibrated prompt tokens after the chat template")
    concurrency: int = Field(description="burst/sustained: requests in flight; rate: cap on in-flight requests")
    mode: Mode
    rate: float | None = None
    max_tokens: int
    # Outcome counts (measured requests; warm-ups excluded).
    requests: int
    ok: int
    failed: int
    failures_by_kind: dict[str, int] = Field(default_factory=dict)
    failure_examples: dict[str, str] = Field(
        default_factory=dict, description="error kind -> the first such request's message (with its HTTP status)"
    )
    failure_rate: float
    # The headline throughput.
    output_tok_s: float | None = Field(description=OUTPUT_TOK_S)
    rounds_output_tok_s: list[float] = Field(
        default_factory=list,
        description="burst: each measured round's output tokens / its wall time (output_tok_s is their median)",
    )
    steady_window: SteadyWindow | None = None
    achieved_rate_rps: float | None = Field(None, description="rate mode: measured arrivals per second")
    # Per-request distributions (successful measured requests).
    ttfc_ms: MetricSummary = Field(default_factory=MetricSummary, description="time to first chunk (vLLM's TTFT)")
    ttft_ms: MetricSummary
    ttfot_ms: MetricSummary = Field(default_factory=MetricSummary, description="time to first answer token")
    e2e_ms: MetricSummary
    e2e_tok_s: MetricSummary
    decode_tok_s: MetricSummary
    tpot_ms: MetricSummary
    itl_ms: MetricSummary = Field(
        description="token-normalized: each gap between reads / the tokens of the later read, one sample per token"
    )
    chunk_gap_ms: MetricSummary = Field(description="raw gaps between token-bearing chunks of different reads")
    coalesced_gaps: int = Field(0, description="chunk gaps inside one network read: left out of ITL and chunk gaps")
    chunk_gaps: int = Field(0, description="every gap between token-bearing chunks, coalesced ones included")
    unmeasured: list[str] = Field(default_factory=list, description="what could not be measured, and why")
    tokens_per_chunk: dict[int, int] = Field(default_factory=dict, description="tokens in a chunk -> chunks")
    token_counts_exact: bool = Field(description="every measured request had exact per-chunk counts")
    # Checks.
    mismatches: Mismatches = Field(default_factory=Mismatches)
    server: ServerChecks
    client: ClientSelfCheck
    client_bound: bool
    slo: SloResult | None = Field(None, description="against the run's SLOs (None: none given)")

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data: Any) -> Any:
        return under_new_names(data, RENAMED_THROUGHPUT)


class ServerSample(_Model):
    """The server's /metrics at one moment of a scenario (about once a second): gauges as read,
    counters as running totals (rates come from differences). None: the server does not expose it."""

    t_ns: int = Field(description="monotonic ns relative to the scenario start, like the request records")
    running: float | None = Field(None, description="vllm:num_requests_running")
    waiting: float | None = Field(None, description="vllm:num_requests_waiting")
    kv_cache_usage: float | None = Field(None, description="vllm:kv_cache_usage_perc (gpu_cache_usage_perc before), 0..1")
    prompt_tokens: float | None = Field(None, description="vllm:prompt_tokens_total")
    generation_tokens: float | None = Field(None, description="vllm:generation_tokens_total")
    spec_draft_tokens: float | None = Field(None, description="vllm:spec_decode_num_draft_tokens_total")
    spec_accepted_tokens: float | None = Field(None, description="vllm:spec_decode_num_accepted_tokens_total")


class ScenarioResult(_Model):
    """Everything about one scenario: summary, rounds, every request (warm-ups included) and the
    server's metrics over time."""

    summary: ScenarioSummary
    calibration: Calibration
    t0_wall: datetime = Field(description="wall-clock time of the scenario's t=0")
    rounds: list[RoundResult] = Field(default_factory=list)
    records: list[RequestRecord] = Field(default_factory=list)
    server_timeline: list[ServerSample] = Field(default_factory=list, description="/metrics sampled about once a second")


class ClientHost(_Model):
    """The machine the client ran on: what it is and how busy it was (a loaded host slows the client)."""

    cpu_model: str | None = None
    cpus: int | None = Field(None, description="logical CPUs")
    platform: str | None = None
    load_average_start: tuple[float, float, float] | None = Field(None, description="1, 5, 15 min when the run started")
    load_average_end: tuple[float, float, float] | None = Field(None, description="1, 5, 15 min when it ended (None: not seen)")


class RunMetadata(_Model):
    """Who measured what, when: client and server versions, models the server lists, the client host."""

    run_id: str
    client: str = "servingctl"
    client_version: str
    python_version: str
    hostname: str | None = None
    client_host: ClientHost | None = None
    deployment: dict[str, Any] | None = Field(
        None, description="what was measured as the controller deployed it (a stored run's reproducibility record)"
    )
    server_version: dict[str, Any] | None = Field(None, description="GET /version as returned")
    server_models: dict[str, Any] | None = Field(None, description="GET /v1/models as returned")
    started_at: datetime
    finished_at: datetime | None = None


SweepStop = Literal[
    "slo-missed", "over-saturated", "max-concurrency", "max-rate", "max-steps", "converged", "failed-at-1", "failed-at-start"
]
# What a sweep varies: requests in flight (burst, sustained) or arrivals per second (mode rate).
SweepAxis = Literal["concurrency", "rate"]


class SweepStep(_Model):
    """One scenario the saturation sweep ran, with the figures it decided on."""

    concurrency: int
    scenario: str
    met: bool
    goodput_rps: float
    goodput_tok_s: float
    output_tok_s: float | None = Field(description="the step's ScenarioSummary.output_tok_s")
    ttft_median_ms: float | None
    saturated: bool = Field(False, description="queueing grew: TTFT rose while throughput flattened, or goodput fell")
    why: str | None = Field(None, description="why it missed the SLOs or counts as saturated, with the figures")
    longest_wait_ms: float | None = Field(None, description="the longest a request waited for its first token or the next")
    stalled: bool = Field(False, description="a wait of STALL_MIN_S or more, STALL_FACTOR x the median TTFT or more")
    # A rate sweep's step (concurrency is then its cap on requests in flight).
    rate: float | None = Field(None, description="rate sweep: the arrival rate offered, requests/s")
    scheduled_rate_rps: float | None = Field(
        None, description="rate sweep: the arrival schedule's own rate (Poisson draws stray from the rate asked)"
    )
    achieved_rate_rps: float | None = Field(
        None, description="rate sweep: successful requests completed per second (first to last completion)"
    )

    def x(self) -> float:
        """Where the step sits on its sweep's axis: the rate offered, else the concurrency."""
        return self.rate if self.rate is not None else float(self.concurrency)

    def at(self) -> str:
        """The step's position in words: '2.5 req/s' or 'c=4'."""
        return f"{self.rate:g} req/s" if self.rate is not None else f"c={self.concurrency}"

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data: Any) -> Any:
        return under_new_names(data, RENAMED_THROUGHPUT)


class SweepResult(_Model):
    """The saturation sweep's search: doubling from 1 (a rate sweep: from its start rate) until the SLO
    fails or the server saturates, then bisection between the highest value that held and the lowest
    that did not."""

    axis: SweepAxis = Field("concurrency", description="what the sweep varied")
    steps: list[SweepStep] = Field(default_factory=list)
    found: int | None = Field(None, description="concurrency sweep: highest concurrency meeting the SLOs (None: not even 1)")
    found_rate: float | None = Field(None, description="rate sweep: highest rate (requests/s) meeting the SLOs unsaturated")
    scenario: str | None = Field(None, description="the scenario measured at `found`")
    stop: SweepStop | None = None
    reason: str | None = None


class RunResult(_Model):
    """A whole sweep: the results file (results.json) is this model's JSON."""

    schema_version: int = SCHEMA_VERSION
    config: RunConfig
    metadata: RunMetadata
    calibrations: list[Calibration] = Field(default_factory=list)
    scenarios: list[ScenarioResult] = Field(default_factory=list)
    failed_scenarios: list[str] = Field(default_factory=list, description="failure rate above max_failure_rate")
    sweep: SweepResult | None = Field(None, description="the saturation sweep's search (config.sweep)")
    slo_cost: SloCost | None = Field(None, description="cost per 1M output tokens at the SLO (a stored run of a priced profile)")
    dataset: DatasetFingerprint | None = Field(None, description="the prompts file the run sent (config.dataset)")

    @property
    def exit_code(self) -> int:
        """0 when every scenario stayed within max_failure_rate, else 1."""
        return 1 if self.failed_scenarios else 0


def scenario_name(
    input_tokens: int,
    concurrency: int,
    mode: Mode = "burst",
    rate: float | None = None,
    prompts: str | None = None,
    replay: float | None = None,
) -> str:
    """Stable scenario name used in files and storage keys: in256-c4, in256-c4-sustained, in256-c4-rate2.5;
    `prompts` replaces in<N> for prompts of varying length (dataset-c4, in128-1024-c4), a replay of
    them at a speed ends -replay<speed> (dataset-c4-replay2)."""
    name = f"{prompts or f'in{input_tokens}'}-c{concurrency}"
    if prompts is not None and replay is not None:
        return f"{name}-replay{replay:g}"
    if mode == "sustained":
        return f"{name}-sustained"
    if mode == "rate":
        return f"{name}-rate{rate:g}"
    return name
