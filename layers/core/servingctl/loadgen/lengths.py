"""Per-request token lengths from a seeded distribution (fixed, uniform range, normal with a spread),
and the command-line form of a distribution (fixed:256, uniform:128:1024, normal:512:64)."""

from __future__ import annotations

import random

from pydantic import ValidationError

from servingctl.schema.results import LENGTH_KINDS, MAX_LENGTH_TOKENS, LengthDistribution

SYNTAX = "fixed:N, uniform:LOW:HIGH or normal:MEAN:SD (tokens), e.g. uniform:128:1024"


class LengthError(ValueError):
    """A distribution typed wrong: the message shows the allowed forms."""


def parse_distribution(text: str) -> LengthDistribution:
    """fixed:N, uniform:LOW:HIGH or normal:MEAN:SD (a bare N is fixed:N)."""
    kind, _, rest = text.strip().partition(":")
    if kind.isdigit() and not rest:
        kind, rest = "fixed", kind
    names = {"fixed": ("tokens",), "uniform": ("low", "high"), "normal": ("mean", "sd")}.get(kind)
    if names is None:
        raise LengthError(f"{text!r}: kind {kind!r}; allowed: {', '.join(LENGTH_KINDS)} ({SYNTAX})")
    parts = rest.split(":") if rest else []
    if len(parts) != len(names):
        raise LengthError(f"{text!r}: {kind} takes {len(names)} number(s) ({SYNTAX})")
    try:
        values = {name: (float(part) if kind == "normal" else int(part)) for name, part in zip(names, parts, strict=True)}
        return LengthDistribution(kind=kind, **values)  # type: ignore[arg-type]
    except ValueError as exc:  # not a number, or out of range (ValidationError is a ValueError)
        errors = exc.errors() if isinstance(exc, ValidationError) else [{"msg": "not a number"}]
        detail = "; ".join(e["msg"].removeprefix("Value error, ") for e in errors)
        raise LengthError(f"{text!r}: {detail} (tokens 1..{MAX_LENGTH_TOKENS}; {SYNTAX})") from None


def sample_lengths(dist: LengthDistribution, count: int, rng: random.Random) -> list[int]:
    """`count` lengths drawn from `dist` with `rng` (normal: rounded, clipped to 1..MAX_LENGTH_TOKENS)."""
    if dist.kind == "fixed":
        assert dist.tokens is not None
        return [dist.tokens] * count
    if dist.kind == "uniform":
        assert dist.low is not None and dist.high is not None
        return [rng.randint(dist.low, dist.high) for _ in range(count)]
    assert dist.mean is not None and dist.sd is not None
    return [min(MAX_LENGTH_TOKENS, max(1, round(rng.gauss(dist.mean, dist.sd)))) for _ in range(count)]
