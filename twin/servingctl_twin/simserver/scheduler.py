"""The simulator's engine core: continuous batching, chunked prefill, prefix cache and MTP drafts.

Pure and synchronous (no clock, no I/O): ``plan_step`` picks the work of the next engine step and
its duration from the timing model, ``commit`` applies it and returns the tokens each sequence
got. The asyncio runtime (``runtime.py``) and the virtual-time replay (``replay.py``) both drive it,
so tests can check the arithmetic without sleeping.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from servingctl_twin.simserver.prefix_cache import PrefixCache
from servingctl_twin.simserver.timing import TimingModel


@dataclass(eq=False)
class Seq:
    """One request inside the engine."""

    prompt_len: int
    target_len: int  # tokens to generate before finishing
    finish_reason: str  # reason reported when target_len is reached: "length" or "stop"
    block_hashes: list[int]
    rng: random.Random  # draft acceptance draws, seeded per request
    sink: Any = None  # the runtime's delivery handle
    computed: int = 0  # prompt tokens computed or reused from the prefix cache
    cached: int = 0  # prompt tokens reused from the prefix cache
    generated: int = 0
    aborted: bool = False
    finished: bool = False


@dataclass
class Step:
    """The work of one engine step and its duration at speed 1."""

    decodes: list[Seq]
    prefills: list[tuple[Seq, int]]
    duration_ms: float


@dataclass
class Counters:
    """Cumulative engine counters, exposed under vLLM's metric names."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)
    success: dict[str, int] = field(default_factory=lambda: {"stop": 0, "length": 0, "abort": 0})


class Scheduler:
    """vLLM-V1-like scheduler: decodes first, then running prefills, then admissions, in a token budget."""

    def __init__(
        self,
        timing: TimingModel,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        mtp_tokens: int,
        mtp_acceptance: float,
        prefix_cache: PrefixCache,
    ) -> None:
        """Set up an idle engine."""
        self.timing = timing
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.mtp_tokens = mtp_tokens
        self.mtp_acceptance = mtp_acceptance
        self.prefix_cache = prefix_cache
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.counters = Counters(accepted_per_pos=[0] * mtp_tokens)

    def add(self, seq: Seq) -> None:
        """Queue a request (it is admitted at a step boundary)."""
        self.waiting.append(seq)

    def abort(self, seq: Seq) -> None:
        """Drop a request (client gone); counted like vLLM's ``abort`` finish reason."""
        if seq.finished or seq.aborted:
            return
        seq.aborted = True
        if seq in self.running:
            self.running.remove(seq)
        else:
            self.waiting.remove(seq)
        self.counters.success["abort"] += 1

    @property
    def idle(self) -> bool:
        """True when nothing is running or waiting."""
        return not self.running and not self.waiting

    def plan_step(self) -> Step | None:
        """Choose the next step's work (None when idle)."""
        budget = self.max_num_batched_tokens
        per_decode = 1 + self.mtp_tokens
        decodes = [s for s in self.running if s.computed >= s.prompt_len]
        budget -= per_decode * len(decodes)
        prefills: list[tuple[Seq, int]] = []
        for seq in self.running:
            if seq.computed < seq.prompt_len and budget > 0:
                chunk = min(seq.prompt_len - seq.computed, budget)
                prefills.append((seq, chunk))
                budget -= chunk
        while self.waiting and len(self.running) < self.max_num_seqs and budget > 0:
            seq = self.waiting.popleft()
            seq.cached = seq.computed = self.prefix_cache.lookup(seq.block_hashes, seq.prompt_len)
            self.running.append(seq)
            chunk = min(seq.prompt_len - seq.computed, budget)
            prefills.append((seq, chunk))
            budget -= chunk
        if not decodes and not prefills:
            return None
        if prefills:
            tokens = per_decode * len(decodes) + sum(chunk for _, chunk in prefills)
            duration = self.timing.mixed_ms(tokens)
        else:
            duration = self.timing.decode_ms(len(decodes), mtp=self.mtp_tokens > 0)
        return Step(decodes=decodes, prefills=prefills, duration_ms=duration)

    def _accepted_drafts(self, seq: Seq) -> int:
        """Leading drafts accepted this step (each position accepted with the set probability)."""
        accepted = 0
        for pos in range(self.mtp_tokens):
            if seq.rng.random() >= self.mtp_acceptance:
                break
            self.counters.accepted_per_pos[pos] += 1
            accepted += 1
        self.counters.num_drafts += 1
        self.counters.num_draft_tokens += self.mtp_tokens
        self.counters.num_accepted_tokens += accepted
        return accepted

    def commit(self, step: Step) -> list[tuple[Seq, int]]:
        """Apply a finished step; return (sequence, new tokens) for every sequence that got tokens."""
        out: list[tuple[Seq, int]] = []
        for seq in step.decodes:
            if seq.aborted:
                continue
            new = 1 + (self._accepted_drafts(seq) if self.mtp_tokens else 0)
            out.append((seq, min(new, seq.target_len - seq.generated)))
        for seq, chunk in step.prefills:
            if seq.aborted:
                continue
            seq.computed += chunk
            if seq.computed >= seq.prompt_len:  # prefill done: it yields the first token
                self.prefix_cache.insert(seq.block_hashes)
                self.counters.prompt_tokens += seq.prompt_len
                out.append((seq, 1))
        for seq, new in out:
            seq.generated += new
            self.counters.generation_tokens += new
            if seq.generated >= seq.target_len:
                seq.finished = True
                self.running.remove(seq)
                self.counters.success[seq.finish_reason] += 1
        return out
