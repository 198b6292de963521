"""The run_benchmark input (what a person types in the Step Functions console, every field but
`profile` defaulted) and the plan derived from it: the scenario matrix within bounds, the duration
estimate that keeps one scenario inside a Lambda worker's 15 minutes, and where each scenario runs.

The estimate is deliberately pessimistic: every prompt of a round is prefilled one after the other
at PREFILL_TOK_S, and each request decodes at `expected_tok_s` (default 10 tok/s, a quarter of the
slowest per-request rate the reference measured). A person whose server is faster raises it.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from servingctl.loadgen.selfcheck import CPU_SHARE_LIMIT, LAG_P99_LIMIT_MS
from servingctl.registry.models import ServingProfile
from servingctl.schema.results import (
    MAX_WARMUP_S,
    Api,
    DatasetFingerprint,
    DatasetSpec,
    LengthDistribution,
    Mode,
    RunConfig,
    SaltMode,
    Slo,
    scenario_name,
)
from servingctl.shared.errors import InvalidInput

# Lambda's hard limit is 900 s; the load gets this much of it, the rest covers connection setup,
# the counter settle, the S3/DynamoDB writes and a margin for the estimate's own error.
LAMBDA_TIMEOUT_S = 900
LAMBDA_BUDGET_S = 780
# An ECS task has no hard limit, but a scenario longer than this is more likely a typo than a plan.
ECS_BUDGET_S = 4 * 3600
PREFILL_TOK_S = 1000.0
DEFAULT_EXPECTED_TOK_S = 10.0
MAX_VALUES = 8  # values per matrix axis
MAX_SCENARIOS = 32
MAX_CONCURRENCY = 256
MAX_INPUT_TOKENS = 262_144
MAX_WORKERS = 8
RUN_ID_PATTERN = r"^\d{8}T\d{6}Z-[a-z0-9][a-z0-9-]{0,39}$"
# A run's dataset is counted again by every worker before its load (/tokenize per prompt) and held in
# its memory: a run inside the VPC takes at most this many prompts, uploaded as at most this many bytes.
MAX_RUN_PROMPTS = 10_000
MAX_UPLOAD_BYTES = 64 * 1024 * 1024

Runner = Literal["auto", "lambda", "ecs"]


class UploadedDataset(BaseModel):
    """The prompts a run inside the VPC sends: what `servingctl bench --profile --dataset` took from
    the user's file, uploaded as JSONL to the run's prefix (POST /benchmarks/{run_id}/dataset), and the file's fingerprint.
    The worker checks the upload against sha256 and the shape before it sends anything."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="of the uploaded JSONL's bytes")
    prompts: int = Field(ge=1, le=MAX_RUN_PROMPTS, description="requests in the upload")
    conversations: int = Field(default=0, ge=0, le=MAX_RUN_PROMPTS, description="conversations among them (0: none)")
    longest_conversation: int = Field(default=0, ge=0, le=MAX_RUN_PROMPTS, description="its turns (0: no conversations)")
    input_bytes: int = Field(ge=1, description="UTF-8 bytes of every prompt's messages (bounds their tokens)")
    max_input_bytes: int = Field(ge=1, description="UTF-8 bytes of the longest prompt's messages")
    output_tokens_bound: int = Field(ge=1, description="output tokens of every request together, at most")
    max_output_tokens: int = Field(ge=1, description="output tokens of the longest answer asked, at most")
    span_s: float | None = Field(default=None, ge=0, description="last timestamp - first (None: no timestamps)")
    file: DatasetFingerprint = Field(description="the user's file: name, format, sha256, entries, prompts taken")


class BenchmarkInput(BaseModel):
    """Input of run_benchmark. Only `profile` is required."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    profile: str = Field(min_length=1)
    # The matrix.
    input_tokens: list[int] = Field(default_factory=lambda: [256, 2048, 8192], min_length=1, max_length=MAX_VALUES)
    concurrencies: list[int] = Field(default_factory=lambda: [1, 2, 4], min_length=1, max_length=MAX_VALUES)
    mode: Mode = "burst"
    rate: float | None = Field(default=None, gt=0, le=1000, description="requests/s (mode rate)")
    warmup: int = Field(default=2, ge=0, le=10)
    warmup_s: float | None = Field(
        default=None, gt=0, le=MAX_WARMUP_S, description="warm-up by time: seconds of load before measuring (warmup then 0)"
    )
    rounds: int = Field(default=5, ge=1, le=50)
    requests: int | None = Field(default=None, ge=1, le=100_000)
    duration_s: float | None = Field(default=None, gt=0, le=ECS_BUDGET_S)
    max_tokens: int = Field(default=256, ge=1, le=32_768)
    seed: int = 42
    salt_mode: SaltMode = "cache-salt"
    max_failure_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    timeout_s: float = Field(default=600.0, gt=0, le=LAMBDA_BUDGET_S, description="per-request timeout")
    api: Api = Field(default="chat", description="chat: /v1/chat/completions; completions: /v1/completions")
    # The user's own prompts, or per-request lengths, instead of the input_tokens matrix.
    dataset: UploadedDataset | None = Field(default=None, description="prompts uploaded with POST /benchmarks/{run_id}/dataset")
    think_time_s: float = Field(default=0.0, ge=0, le=3600, description="conversations: pause between a reply and the next turn")
    replay_speed: float | None = Field(default=None, gt=0, le=1000, description="send the dataset at its timestamps / this")
    input_distribution: LengthDistribution | None = Field(default=None, description="per-request prompt lengths")
    output_distribution: LengthDistribution | None = Field(default=None, description="per-request output lengths")
    # Service-level objectives, and the saturation sweep instead of the concurrencies.
    slos: list[Slo] = Field(default_factory=list, max_length=9, description="latency objectives: goodput per scenario")
    slo_share: float = Field(default=1.0, gt=0, le=1, description="share of requests that must meet every per-request SLO")
    sweep: bool = Field(default=False, description="search the highest concurrency meeting the SLOs (concurrencies ignored)")
    sweep_max_concurrency: int = Field(default=64, ge=1, le=MAX_CONCURRENCY, description="highest concurrency the sweep tries")
    sweep_max_steps: int = Field(default=10, ge=2, le=20, description="most scenarios the sweep runs")
    # Around the matrix.
    start: bool = Field(default=False, description="start the profile first when it is not READY")
    stop: bool = Field(default=False, description="stop the profile at the end (also after a failure)")
    start_options: dict[str, Any] = Field(default_factory=dict, description="start_profile input besides profile")
    stop_options: dict[str, Any] = Field(default_factory=dict, description="stop_profile input besides profile")
    runner: Runner = Field(default="auto", description="auto: ECS only for scenarios too long for Lambda")
    max_workers: int = Field(default=4, ge=1, le=MAX_WORKERS, description="workers one client-bound scenario may be split across")
    expected_tok_s: float = Field(
        default=DEFAULT_EXPECTED_TOK_S, gt=0, le=100_000, description="per-request decode rate the estimate assumes"
    )
    client_cpu_limit: float = Field(
        default=CPU_SHARE_LIMIT, ge=0.0, le=1.0, description="client self-check: CPU share of one core"
    )
    client_lag_limit_ms: float = Field(
        default=LAG_P99_LIMIT_MS, gt=0, le=1000, description="client self-check: event-loop lag p99"
    )
    managed_api: str | None = Field(default=None, description="managed API of the price catalog to compare with")
    label: str | None = Field(default=None, max_length=200)
    run_id: str | None = Field(default=None, pattern=RUN_ID_PATTERN)

    @model_validator(mode="after")
    def _consistent(self) -> BenchmarkInput:
        for field in ("input_tokens", "concurrencies"):
            values = getattr(self, field)
            if len(set(values)) != len(values):
                raise ValueError(f"{field}: duplicate values {values}; give each value once")
        if any(v < 1 or v > MAX_INPUT_TOKENS for v in self.input_tokens):
            raise ValueError(f"input_tokens: {self.input_tokens}; allowed: integers 1..{MAX_INPUT_TOKENS}")
        if any(v < 1 or v > MAX_CONCURRENCY for v in self.concurrencies):
            raise ValueError(f"concurrencies: {self.concurrencies}; allowed: integers 1..{MAX_CONCURRENCY}")
        if self.warmup_s is not None and self.warmup and "warmup" in self.model_fields_set:
            raise ValueError(f"warmup, warmup_s: warm-up by rounds or by time, not both (warmup {self.warmup})")
        if self.mode == "rate" and self.rate is None:
            raise ValueError("rate: required when mode is rate (requests per second, 0 < rate <= 1000)")
        if self.mode != "rate" and self.rate is not None:
            raise ValueError(f"rate: only for mode rate (mode is {self.mode})")
        if self.mode in ("sustained", "rate") and self.requests is None and self.duration_s is None and self.dataset is None:
            raise ValueError(f"requests or duration_s: mode {self.mode} needs one of them (with a dataset: every prompt once)")
        if self.dataset is not None and self.dataset.conversations and self.mode != "sustained":
            raise ValueError(f"mode: conversations run in mode sustained; got {self.mode}")
        if self.replay_speed is not None and self.dataset is None:
            raise ValueError("replay_speed: replays a dataset's timestamps; give a dataset")
        if self.replay_speed is not None and self.dataset is not None and self.dataset.span_s is None:
            raise ValueError("replay_speed: replays the dataset's timestamps; the dataset has none")
        if self.mode == "burst" and (self.requests is not None or self.duration_s is not None):
            raise ValueError("requests, duration_s: only for modes sustained and rate (burst uses warmup and rounds)")
        if self.sweep:
            if not self.slos:
                raise ValueError("slos: the sweep searches the highest concurrency meeting an SLO; give at least one")
            if len(self.input_tokens) != 1:
                raise ValueError(f"input_tokens: the sweep searches one input length; got {self.input_tokens}")
            if self.mode == "rate":
                raise ValueError(
                    "mode: the in-VPC sweep varies concurrency; use burst or sustained (a rate sweep runs from "
                    "a machine that reaches the endpoint: servingctl bench --endpoint URL --model NAME --sweep --mode rate)"
                )
        try:  # the engine's own rules on what goes together (datasets, distributions, salts, replay)
            engine_config(self, "http://profile", self.profile, {}, dataset_source="upload")
        except ValidationError as exc:
            raise ValueError("; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())) from None
        return self


class PlannedScenario(BaseModel):
    """One cell of the matrix, in run order, with where it runs and how long it may take."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    position: int
    input_tokens: int = Field(description="the calibrated length; 0 when the prompts vary (prompts names them)")
    prompts: str | None = Field(default=None, description="dataset, conversations or in<low>-<high>: prompts that vary")
    concurrency: int
    runner: Literal["lambda", "ecs"]
    estimate_s: float


def parse_benchmark_input(data: Any) -> BenchmarkInput:
    """Validate the execution input; InvalidInput names each bad field and what is allowed."""
    if not isinstance(data, dict):
        raise InvalidInput(
            f"invalid input: expected a JSON object with at least a profile; fields: {', '.join(BenchmarkInput.model_fields)}"
        )
    try:
        return BenchmarkInput.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            path = ".".join(str(p) for p in err["loc"])
            if not path:  # the cross-field rules name their fields themselves
                problems.append(err["msg"].removeprefix("Value error, "))
            elif err["type"] == "extra_forbidden":
                problems.append(f"{path}: unknown field; allowed fields: {', '.join(BenchmarkInput.model_fields)}")
            elif err["type"] == "missing":
                problems.append(f"{path}: required")
            else:
                problems.append(f"{path}: {err['msg']} (got {err.get('input')!r})")
        raise InvalidInput("invalid input: " + "; ".join(problems)) from None


def _bound(distribution: LengthDistribution) -> float:
    """A length the distribution's draws stay under (normal: 3 standard deviations above the mean)."""
    if distribution.kind == "fixed":
        return float(distribution.tokens or 0)
    if distribution.kind == "uniform":
        return float(distribution.high or 0)
    return (distribution.mean or 0.0) + 3 * (distribution.sd or 0.0)


def request_lengths(given: BenchmarkInput, input_tokens: int, longest: bool = False) -> tuple[float, float]:
    """Prompt and output tokens the estimate takes for one request: the matrix's, a distribution's
    bound, or a dataset's mean (`longest`: its longest prompt and answer; its bytes bound its tokens)."""
    output = _bound(given.output_distribution) if given.output_distribution is not None else float(given.max_tokens)
    data = given.dataset
    if data is not None:
        prompt = data.max_input_bytes if longest else data.input_bytes / data.prompts
        if given.output_distribution is None:  # else the engine draws the output lengths
            output = data.max_output_tokens if longest else data.output_tokens_bound / data.prompts
        return prompt, output
    prompt = _bound(given.input_distribution) if given.input_distribution is not None else float(input_tokens)
    return prompt, output


def request_seconds(given: BenchmarkInput, input_tokens: int, concurrency: int, longest: bool = False) -> float:
    """Pessimistic seconds of one request when `concurrency` are in flight: all prompts of the
    round prefilled one after the other, then its output at expected_tok_s."""
    prompt, output = request_lengths(given, input_tokens, longest)
    return prompt * concurrency / PREFILL_TOK_S + output / given.expected_tok_s


def estimate_seconds(given: BenchmarkInput, input_tokens: int, concurrency: int) -> float:
    """Pessimistic wall time of one scenario's load (warm-ups included); with a dataset its longest
    request may end last, and its longest conversation runs turn after turn on one stream."""
    one = request_seconds(given, input_tokens, concurrency)
    warm = given.warmup * one if given.warmup_s is None else given.warmup_s + one  # a started warm-up request ends
    data = given.dataset
    tail = request_seconds(given, input_tokens, concurrency, longest=True) if data is not None else one
    if given.mode == "burst":
        return warm + (given.rounds - 1) * one + tail
    if data is not None and given.replay_speed is not None and data.span_s is not None:
        return warm + data.span_s / given.replay_speed + tail
    if data is not None and given.requests is None and given.duration_s is None:  # every prompt once
        turns = math.ceil(data.prompts / concurrency)
        spread = (turns - 1) * (one + given.think_time_s) + tail
        talk = data.longest_conversation * (tail + given.think_time_s)
        return warm + max(spread, talk)
    if given.duration_s is not None and (given.requests is None or given.mode == "sustained"):
        load = given.duration_s
        if given.requests is not None:
            load = min(load, math.ceil(given.requests / concurrency) * one)
        return warm + load + one
    if given.mode == "sustained":
        return warm + math.ceil((given.requests or 0) / concurrency) * one
    arrivals = (given.requests or 0) / (given.rate or 1.0)
    if given.duration_s is not None:
        arrivals = min(arrivals, given.duration_s)
    return warm + arrivals + one


def _runner_for(given: BenchmarkInput, name: str, estimate: float, ecs_available: bool) -> Literal["lambda", "ecs"]:
    too_long_for_lambda = estimate > LAMBDA_BUDGET_S
    how = (
        f"scenario {name}: about {estimate:.0f} s at {given.expected_tok_s:g} tok/s per request "
        f"(expected_tok_s) and {PREFILL_TOK_S:g} prompt tok/s"
    )
    if estimate > ECS_BUDGET_S:
        raise InvalidInput(
            f"invalid input: {how}, more than the {ECS_BUDGET_S} s any worker may take; "
            "lower rounds, requests, duration_s or max_tokens"
        )
    if given.runner == "ecs" or (given.runner == "auto" and too_long_for_lambda):
        if not ecs_available:
            reason = (
                "runner: ecs" if given.runner == "ecs" else f"{how}, more than the {LAMBDA_BUDGET_S} s a Lambda worker may take"
            )
            raise InvalidInput(
                f"invalid input: {reason}; the ECS benchmark task is not deployed (set the BenchImageUri "
                "parameter), so lower rounds, requests, duration_s or max_tokens, or raise expected_tok_s "
                "if your server is faster"
            )
        return "ecs"
    if too_long_for_lambda:
        raise InvalidInput(
            f"invalid input: {how}, more than the {LAMBDA_BUDGET_S} s a Lambda worker may take with runner "
            "lambda; lower rounds, requests, duration_s or max_tokens, raise expected_tok_s if your server is "
            'faster, or use runner "auto" or "ecs"'
        )
    return "lambda"


def sweep_scenario(given: BenchmarkInput, concurrency: int, position: int) -> PlannedScenario:
    """The sweep's next scenario (on Lambda: plan_scenarios checked the largest fits)."""
    tokens = given.input_tokens[0]
    return PlannedScenario(
        name=scenario_name(tokens, concurrency, given.mode, given.rate),
        position=position,
        input_tokens=tokens,
        concurrency=concurrency,
        runner="lambda",
        estimate_s=round(estimate_seconds(given, tokens, concurrency), 1),
    )


def plan_scenarios(given: BenchmarkInput, profile: ServingProfile, *, ecs_available: bool) -> list[PlannedScenario]:
    """The matrix in run order (input length, then concurrency), each scenario with its runner."""
    limit = profile.serving.max_model_len
    label = prompts_label(given)
    if limit is not None and label is None:
        too_long = [t for t in given.input_tokens if t + given.max_tokens > limit]
        if too_long:
            raise InvalidInput(
                f"invalid input: input_tokens {too_long} + max_tokens {given.max_tokens} exceed the profile's "
                f"max_model_len {limit}; allowed input_tokens: 1..{max(1, limit - given.max_tokens)}"
            )
    if given.sweep:  # sweep_next plans each step; every step must fit a Lambda worker, the largest too
        tokens, top = given.input_tokens[0], given.sweep_max_concurrency
        estimate = estimate_seconds(given, tokens, top)
        if estimate > LAMBDA_BUDGET_S:
            raise InvalidInput(
                f"invalid input: sweep_max_concurrency {top}: about {estimate:.0f} s a scenario at {given.expected_tok_s:g} "
                f"tok/s per request, more than the {LAMBDA_BUDGET_S} s a Lambda worker may take (the sweep's steps run on "
                "Lambda); lower sweep_max_concurrency, rounds or max_tokens, or raise expected_tok_s"
            )
        return []
    lengths = [0] if label is not None else given.input_tokens  # varying prompts: one workload
    count = len(lengths) * len(given.concurrencies)
    if count > MAX_SCENARIOS:
        raise InvalidInput(f"invalid input: input_tokens x concurrencies is {count} scenarios; allowed: at most {MAX_SCENARIOS}")
    planned: list[PlannedScenario] = []
    for tokens in lengths:
        for concurrency in given.concurrencies:
            name = scenario_name(tokens, concurrency, given.mode, given.rate, label, given.replay_speed)
            estimate = estimate_seconds(given, tokens, concurrency)
            runner = _runner_for(given, name, estimate, ecs_available)
            planned.append(
                PlannedScenario(
                    name=name,
                    position=len(planned),
                    input_tokens=tokens,
                    prompts=label,
                    concurrency=concurrency,
                    runner=runner,
                    estimate_s=round(estimate, 1),
                )
            )
    return planned


def prompts_label(given: BenchmarkInput) -> str | None:
    """What names scenarios whose prompts vary (as the engine's workload labels them), None: the matrix."""
    if given.dataset is not None:
        return "conversations" if given.dataset.conversations else "dataset"
    if given.input_distribution is not None:
        return f"in{given.input_distribution.short()}"
    return None


def run_config(given: BenchmarkInput, profile: ServingProfile, dataset_source: str | None = None) -> RunConfig:
    """The engine's config: the profile's endpoint, model and routing header, the matrix as given,
    a dataset read from `dataset_source` (the run's upload)."""
    return engine_config(
        given,
        profile.endpoint_url,
        profile.model,
        {profile.routing_header.name: profile.routing_header.value},
        dataset_source=dataset_source,
    )


def engine_config(
    given: BenchmarkInput, endpoint: str, model: str, headers: dict[str, str], *, dataset_source: str | None
) -> RunConfig:
    """The RunConfig of an input against one endpoint (ValidationError: the engine refuses the combination)."""
    dataset = None
    if given.dataset is not None:
        if dataset_source is None:
            raise InvalidInput("invalid input: dataset: the run's upload is not known")
        dataset = DatasetSpec(source=dataset_source, format="jsonl", output_tokens=given.dataset.file.output_tokens)
    return RunConfig(
        endpoint=endpoint,
        model=model,
        headers=headers,
        api=given.api,
        dataset=dataset,
        think_time_s=given.think_time_s,
        replay_speed=given.replay_speed,
        input_distribution=given.input_distribution,
        output_distribution=given.output_distribution,
        input_tokens=given.input_tokens,
        concurrencies=given.concurrencies,
        mode=given.mode,
        rate=given.rate,
        warmup=0 if given.warmup_s is not None else given.warmup,
        warmup_s=given.warmup_s,
        rounds=given.rounds,
        requests=given.requests,
        duration_s=given.duration_s,
        max_tokens=given.max_tokens,
        seed=given.seed,
        salt_mode=given.salt_mode,
        max_failure_rate=given.max_failure_rate,
        timeout_s=given.timeout_s,
        slos=given.slos,
        slo_share=given.slo_share,
        sweep=given.sweep,
        sweep_max_concurrency=given.sweep_max_concurrency,
        sweep_max_steps=given.sweep_max_steps,
    )
