"""Configuration of the simulator server: engine shape, timing model, speed factor and faults."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from servingctl_twin.simserver.timing import TimingModel

# Fault name -> (kind, meaning); probabilities are per request, stall is real seconds.
FAULTS: dict[str, str] = {
    "error-rate": "probability 0..1 that a chat request answers HTTP 500",
    "stream-cut": "probability 0..1 that a stream is cut mid-way (connection closed, no [DONE])",
    "stall": "seconds (real time, not scaled by speed) one pause mid-stream in every stream",
    "malformed": "probability 0..1 that a stream carries one malformed SSE line mid-way",
    "models-fail": "number of first GET /v1/models requests that answer HTTP 503 (a smoke test failing, then passing)",
}
_PROBABILITY_FAULTS = ("error-rate", "stream-cut", "malformed")


class FaultError(ValueError):
    """A --fault value that cannot be used."""


class Faults(BaseModel):
    """Injected faults (all off by default)."""

    model_config = ConfigDict(frozen=True)

    error_rate: float = Field(default=0.0, ge=0, le=1)
    stream_cut: float = Field(default=0.0, ge=0, le=1)
    stall_s: float = Field(default=0.0, ge=0)
    malformed: float = Field(default=0.0, ge=0, le=1)
    models_fail: int = Field(default=0, ge=0)
    seed: int = 0


def _allowed() -> str:
    return "; ".join(f"{name}=<{meaning}>" for name, meaning in FAULTS.items())


def parse_faults(specs: list[str], seed: int = 0) -> Faults:
    """Parse repeatable ``--fault NAME=VALUE`` values; errors name the flag and the allowed values."""
    values: dict[str, float] = {}
    for spec in specs:
        name, sep, raw = spec.partition("=")
        name = name.strip()
        if name not in FAULTS or not sep:
            raise FaultError(f"--fault {spec!r}: expected NAME=VALUE with NAME one of: {_allowed()}")
        try:
            value = float(raw)
        except ValueError:
            raise FaultError(f"--fault {name}: {raw!r} is not a number ({FAULTS[name]})") from None
        if value < 0 or (name in _PROBABILITY_FAULTS and value > 1):
            raise FaultError(f"--fault {name}: {value} out of range ({FAULTS[name]})")
        values[name] = value
    return Faults(
        error_rate=values.get("error-rate", 0.0),
        stream_cut=values.get("stream-cut", 0.0),
        stall_s=values.get("stall", 0.0),
        malformed=values.get("malformed", 0.0),
        models_fail=int(values.get("models-fail", 0)),
        seed=seed,
    )


class SimConfig(BaseModel):
    """Everything the simulator server needs; defaults are the reference deployment (FACTS.md)."""

    model_config = ConfigDict(frozen=True)

    model: str = "deepseek-ai/DeepSeek-V4-Flash"
    max_model_len: int = Field(default=16384, ge=16)
    max_num_seqs: int = Field(default=4, ge=1)
    max_num_batched_tokens: int = Field(default=2048, ge=16)
    mtp_tokens: int = Field(default=1, ge=0, le=8)
    mtp_acceptance: float = Field(default=0.66, ge=0, le=1)
    block_size: int = Field(default=16, ge=1)
    kv_cache_tokens: int = Field(default=50182, ge=16)
    speed: float = Field(default=1.0, gt=0, description="divides every duration (50 = 50x faster)")
    timing: TimingModel = Field(default_factory=TimingModel)
    faults: Faults = Field(default_factory=Faults)
    debug_timings: bool = Field(
        default=False,
        description="record when each stream's first chunks were sent (GET /debug/timings), for client benchmarks",
    )
    pace_ms: float = Field(
        default=0.0,
        ge=0,
        le=1000,
        description="at least this long between a stream's writes, one event per write (a GPU server's "
        "one event per read) unless batch_writes; 0 = as fast as the engine steps",
    )
    pace_phase: Literal["step", "stream"] = Field(
        default="step",
        description="with pace_ms, when a stream writes: step = at the engine's step instants, every stream "
        "at once (vLLM advances all running sequences in one step; a client reads them in bursts); stream = "
        "pace_ms after the stream's own last write (streams out of phase, as from many servers behind one "
        "load balancer: the most wake-ups for a client)",
    )
    batch_writes: bool = Field(
        default=False,
        description="each write carries every event the stream has pending; with pace_ms, many events per "
        "read for any client (the flood shape of client benchmarks); default one event per write",
    )

    @model_validator(mode="after")
    def _budget_covers_decodes(self) -> SimConfig:
        if self.max_num_batched_tokens < self.max_num_seqs * (1 + self.mtp_tokens):
            raise ValueError("max_num_batched_tokens must cover max_num_seqs x (1 + mtp_tokens) decode tokens")
        return self

    def expected_ttft_s(self, prompt_tokens: int, cached_tokens: int = 0) -> float:
        """Wall-clock TTFT of a lone request on an idle server at this speed."""
        ms = self.timing.idle_ttft_ms(prompt_tokens - cached_tokens, self.max_num_batched_tokens)
        return ms / 1000 / self.speed
