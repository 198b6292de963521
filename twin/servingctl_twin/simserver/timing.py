"""The simulator's timing model: how long one engine step takes, fitted to the reference figures.

Model (one engine step, like vLLM V1 with chunked prefill and FULL_DECODE_ONLY CUDA graphs):
- a step that carries any prefill tokens runs eagerly: ``eager_step_ms + prefill_ms_per_token x
  (all tokens of the step)``; it is capped at ``max_num_batched_tokens`` tokens (chunked prefill);
- a step with only decodes runs on the CUDA graph: ``decode_step_ms[batch]`` (or the MTP table);
- every request pays ``frontend_ms`` (HTTP, chat template, tokenization) before the engine sees it;
- a request arriving while a step runs waits for the next step (so in a burst the first request is
  prefilled alone, the others together in the next step: this is why the reference's median TTFT
  grows from 113 ms at c1 to 172 ms at c2 and 230 ms at c4).

Derivation from FACTS.md (no MTP, max-num-batched-tokens 2048, concurrency 1 TTFT 112.9 / 182.6 /
691.8 ms at 254 / 2046 / 8185 tokens, 8185 = 4 chunks of 2048):
  prefill_ms_per_token = (182.6 - 112.9) / (2046 - 254)             = 0.038895
  frontend + eager     = 112.9 - 254 x 0.038895                      = 103.021
  3 x eager            = 691.8 - 8185 x 0.038895 - 103.021           -> eager 90.141, frontend 12.879
Decode steps without MTP (aggregate tok/s 102.67 / 169.88 / 297.09 at c1 / c2 / c4, 254 tokens):
  c1: 256 / 102.67 s = 112.9 ms + 255 x d1                           -> d1 = 9.335 ms
  c2: 512 / 169.88 s = 212.9 ms + 254 x d2 + d1                      -> d2 = 10.99 ms
  c4: 1024 / 297.09 s = 232.7 ms + 254 x d4 + d3 (d3 interpolated)   -> d4 = 12.61 ms
With MTP=1 (acceptance 0.66) the same arithmetic on 135.55 / 227.95 / 358.41 tok/s, solved with
the scheduler replay (``replay.burst``, median of 5 rounds) because accepted drafts are random,
gives the MTP table (d3 interpolated). The fit reproduces the other published cells without further
tuning: without MTP every aggregate within 1.1 % and every median TTFT within 5.1 % (e.g. 8185 x c4:
172.9 vs 172.28 tok/s, 1710.9 vs 1702.6 ms); with MTP within 8.4 % (2046 x c4: 302.5 vs 330.29, the
reference measured MTP with 4096 batched tokens, our default stays 2048 so the TTFTs match).
tests/unit/twin/simserver checks these bounds.
"""

from __future__ import annotations

from typing import TypedDict

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Timing(TypedDict):
    frontend_ms: float
    eager_step_ms: float
    prefill_ms_per_token: float
    decode_step_ms: dict[int, float]
    decode_step_ms_mtp: dict[int, float]


# The parameter table (milliseconds), derived above. Batch sizes beyond the table extrapolate
# linearly from its last two rows.
REFERENCE_TIMING: _Timing = {
    "frontend_ms": 12.879,
    "eager_step_ms": 90.141,
    "prefill_ms_per_token": 0.038895,
    "decode_step_ms": {1: 9.335, 2: 10.99, 3: 11.80, 4: 12.61},
    "decode_step_ms_mtp": {1: 11.31, 2: 13.114, 3: 14.941, 4: 16.769},
}


def _interpolate(table: dict[int, float], batch: int) -> float:
    """Step time for ``batch`` from a batch-size table (linear between rows, extrapolated past it)."""
    if batch in table:
        return table[batch]
    sizes = sorted(table)
    if batch < sizes[0]:
        return table[sizes[0]]
    lower = max(s for s in sizes if s < batch)
    uppers = [s for s in sizes if s > batch]
    if uppers:
        upper = uppers[0]
    else:  # past the table: extend the last segment
        lower, upper = sizes[-2], sizes[-1]
    slope = (table[upper] - table[lower]) / (upper - lower)
    return table[lower] + slope * (batch - lower)


class TimingModel(BaseModel):
    """Durations of the simulated engine in milliseconds at speed 1 (see the module docstring)."""

    model_config = ConfigDict(frozen=True)

    frontend_ms: float = Field(default=REFERENCE_TIMING["frontend_ms"], ge=0)
    eager_step_ms: float = Field(default=REFERENCE_TIMING["eager_step_ms"], ge=0)
    prefill_ms_per_token: float = Field(default=REFERENCE_TIMING["prefill_ms_per_token"], ge=0)
    decode_step_ms: dict[int, float] = Field(default_factory=lambda: dict(REFERENCE_TIMING["decode_step_ms"]))
    decode_step_ms_mtp: dict[int, float] = Field(default_factory=lambda: dict(REFERENCE_TIMING["decode_step_ms_mtp"]))

    @field_validator("decode_step_ms", "decode_step_ms_mtp")
    @classmethod
    def _two_rows(cls, table: dict[int, float]) -> dict[int, float]:
        if len(table) < 2 or min(table) < 1 or min(table.values()) <= 0:
            raise ValueError("needs at least two rows, batch sizes >= 1 and positive step times")
        return table

    def decode_ms(self, batch: int, mtp: bool) -> float:
        """Duration of a decode-only (CUDA graph) step with ``batch`` sequences."""
        return _interpolate(self.decode_step_ms_mtp if mtp else self.decode_step_ms, batch)

    def mixed_ms(self, step_tokens: int) -> float:
        """Duration of an eager step carrying prefill tokens (``step_tokens`` = all its tokens)."""
        return self.eager_step_ms + self.prefill_ms_per_token * step_tokens

    def idle_ttft_ms(self, uncached_prompt_tokens: int, max_num_batched_tokens: int) -> float:
        """TTFT of a lone request on an idle server: frontend plus its prefill chunks."""
        chunks = max(1, -(-uncached_prompt_tokens // max_num_batched_tokens))
        return self.frontend_ms + chunks * self.eager_step_ms + self.prefill_ms_per_token * uncached_prompt_tokens
