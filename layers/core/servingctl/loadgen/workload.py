"""The requests of a scenario whose prompts vary: a dataset's prompts, or prompts drawn from length
distributions, each with its output length and the prompt tokens the server must report for it.

Counts come from the server itself: a dataset prompt is counted through /tokenize with its messages
and the generation prompt (as usage.prompt_tokens counts it, chat template included); a ShareGPT
reference answer through /tokenize of its text (special tokens added, as `vllm bench serve` counts it
with the tokenizer). A distribution's input length is met by calibrating each distinct length (one
shared cache of counts), so its prompt is the largest one of at most that many tokens.
"""

from __future__ import annotations

import asyncio
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from servingctl.loadgen.backend import Backend
from servingctl.loadgen.calibration import CalibrationError, build_prompt, calibrate, tokenize_body
from servingctl.loadgen.datasets import Dataset, DatasetPrompt, conversations
from servingctl.loadgen.lengths import sample_lengths
from servingctl.schema.results import Calibration, RunConfig

# Distinct prompts drawn for a distribution when the run's request count does not bound it: the
# scenario cycles through them.
DRAWN_PROMPTS = 1000
# /tokenize calls in flight while a dataset is counted.
COUNT_CONCURRENCY = 8

Messages = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class PlannedPrompt:
    """One request to send: its messages, output length and the prompt tokens expected (None: not counted)."""

    messages: Messages
    max_tokens: int
    prompt_tokens: int | None
    timestamp_s: float | None = None  # a trace's send time (replay)


@dataclass(frozen=True)
class Workload:
    """A scenario's prompts (cycled when it sends more), what names it and its summary calibration."""

    label: str  # replaces in<N> in scenario names: dataset, in128-1024
    prompts: list[PlannedPrompt]
    calibration: Calibration
    # Multi-turn: the prompts grouped by conversation, each turn sent after the previous reply with
    # the history before it (its prompt_tokens then unknown in advance: None past the first turn).
    conversations: list[list[PlannedPrompt]] | None = None
    # A part of a trace (split_workload): the whole trace's first timestamp, every part's t=0.
    trace_start_s: float | None = None

    def prompt(self, position: int) -> PlannedPrompt:
        """The prompt of the position-th request of a phase (warm-ups, then measured from 0 again)."""
        return self.prompts[position % len(self.prompts)]


def split_workload(
    workload: Workload, concurrencies: Sequence[int], *, requests: int | None, rounds: int | None
) -> list[Workload]:
    """The workload dealt to processes of `concurrencies` streams, each measured request of the one-process
    plan to exactly one process, in order: whole conversations in turn; a burst's `rounds`, each
    process its streams' slice of every round; else the `requests` (each prompt once when None) in turn,
    a trace's parts keeping its first timestamp as their t=0. Each part gets at least one (spread_count)."""
    count = len(concurrencies)
    if workload.conversations is not None:
        groups = [workload.conversations[i::count] for i in range(count)]
        return [replace(workload, prompts=[p for talk in g for p in talk], conversations=g) for g in groups]
    if rounds is not None:
        width, first = sum(concurrencies), [sum(concurrencies[:i]) for i in range(count)]
        return [
            replace(workload, prompts=[workload.prompt(r * width + first[i] + j) for r in range(rounds) for j in range(c)])
            for i, c in enumerate(concurrencies)
        ]
    sequence = [workload.prompt(k) for k in range(requests)] if requests is not None else workload.prompts
    start = min((p.timestamp_s or 0.0 for p in workload.prompts), default=0.0)
    return [replace(workload, prompts=sequence[i::count], trace_start_s=start) for i in range(count)]


def as_messages(messages: Messages) -> list[dict[str, str]]:
    """The request body's messages."""
    return [{"role": role, "content": content} for role, content in messages]


def _summary_calibration(label: str, counts: Sequence[int | None], warnings: list[str], probes: int) -> Calibration:
    known = [c for c in counts if c is not None]
    mean = round(statistics.fmean(known)) if known else 0
    return Calibration(
        target_tokens=mean,
        actual_tokens=mean,
        repetitions=0,
        method="dataset",
        unit="",
        probes=probes,
        warnings=[f"{label}: each request is checked against its own prompt tokens; shown: their mean", *warnings],
    )


async def _count(backend: Backend, body: dict[str, object]) -> int | None:
    status, answer = await backend.post_json("/tokenize", body)
    count = answer.get("count") if isinstance(answer, dict) else None
    return count if status == 200 and isinstance(count, int) else None


async def dataset_workload(backend: Backend, dataset: Dataset, config: RunConfig) -> Workload:
    """The dataset's prompts with their counts and output lengths (config.dataset.output_tokens)."""
    assert config.dataset is not None
    from_dataset = config.dataset.output_tokens == "dataset"
    slots = asyncio.Semaphore(COUNT_CONCURRENCY)

    async def counted(body: dict[str, object]) -> int | None:
        async with slots:
            return await _count(backend, body)

    prompt_counts = await asyncio.gather(*(counted(tokenize_body(backend, as_messages(p.messages))) for p in dataset.prompts))
    references: list[int | None] = [None] * len(dataset.prompts)
    if from_dataset:
        references = list(
            await asyncio.gather(
                *(
                    counted({"model": backend.model, "prompt": p.reference}) if _by_reference(p) else _none()
                    for p in dataset.prompts
                )
            )
        )
    warnings = []
    if any(c is None for c in prompt_counts):
        warnings.append("/tokenize did not count every prompt: those requests' prompt tokens are not checked")
    drawn = (
        sample_lengths(config.output_distribution, len(dataset.prompts), random.Random(f"{config.seed}:output"))
        if config.output_distribution is not None
        else None
    )
    planned = []
    grouped = conversations(dataset.prompts)
    multi_turn = any(len(group) > 1 for group in grouped)
    later_turns = {id(p) for group in grouped for p in group[1:]}
    for i, (p, count, reference) in enumerate(zip(dataset.prompts, prompt_counts, references, strict=True)):
        if from_dataset and _by_reference(p) and reference is None:
            raise CalibrationError(f"entry {p.line}: /tokenize could not count the reference answer (its output length)")
        if from_dataset:
            max_tokens = reference if reference is not None else (p.output_tokens or config.max_tokens)
        else:
            max_tokens = drawn[i] if drawn is not None else config.max_tokens
        expected = None if id(p) in later_turns else count  # the history before a later turn is generated
        planned.append(PlannedPrompt(p.messages, max_tokens, expected, p.timestamp_s))
    calls = len(prompt_counts) + sum(1 for p in dataset.prompts if from_dataset and _by_reference(p))
    calibration = _summary_calibration("dataset", prompt_counts, warnings, calls)
    if not multi_turn:
        return Workload("dataset", planned, calibration)
    by_prompt = {id(p): q for p, q in zip(dataset.prompts, planned, strict=True)}
    turns = [[by_prompt[id(p)] for p in group] for group in grouped]
    return Workload("conversations", planned, calibration, conversations=turns)


def _by_reference(prompt: DatasetPrompt) -> bool:
    """The prompt's output length is its reference answer's token count (no output_tokens given)."""
    return prompt.reference is not None and prompt.output_tokens is None


async def _none() -> None:
    return None


async def distribution_workload(backend: Backend, config: RunConfig, fixed: Calibration | None = None) -> Workload:
    """Prompts drawn from config.input_distribution (or the one `fixed` calibrated prompt) with output
    lengths from config.output_distribution (or max_tokens); seeded by config.seed."""
    count = config.requests or DRAWN_PROMPTS
    outputs = (
        sample_lengths(config.output_distribution, count, random.Random(f"{config.seed}:output"))
        if config.output_distribution is not None
        else [config.max_tokens] * count
    )
    if fixed is not None:
        prompt: Messages = (("user", build_prompt(fixed.repetitions)),)
        planned = [PlannedPrompt(prompt, out, fixed.actual_tokens) for out in outputs]
        return Workload(f"in{fixed.target_tokens}", planned, fixed)
    assert config.input_distribution is not None
    inputs = sample_lengths(config.input_distribution, count, random.Random(f"{config.seed}:input"))
    memo: dict[int, int] = {}
    calibrations: dict[int, Calibration] = {}
    for target in sorted(set(inputs)):
        calibrations[target] = await calibrate(backend, target, config.salt_mode, config.seed, memo=memo)
    planned = [
        PlannedPrompt((("user", build_prompt(calibrations[i].repetitions)),), out, calibrations[i].actual_tokens)
        for i, out in zip(inputs, outputs, strict=True)
    ]
    warnings = sorted({w for c in calibrations.values() for w in c.warnings})
    label = f"in{config.input_distribution.short()}"
    return Workload(label, planned, _summary_calibration(label, [p.prompt_tokens for p in planned], warnings, len(memo)))
