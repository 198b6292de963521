"""Prompt calibration: how many repetitions of a fixed sentence make `target` prompt tokens after
the chat template, found by doubling then bisection (the reference's method).

Counting uses vLLM `/tokenize` (messages + add_generation_prompt, so the template is counted); a
server without it (managed APIs) is probed with 1-token requests whose usage.prompt_tokens is read.
The result is the largest repetition count whose prompt is at most `target` tokens.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from servingctl.loadgen.backend import COMPLETION_PATHS, Backend
from servingctl.schema.results import Calibration, CalibrationMethod, SaltMode

UNIT = "This is deterministic benchmark input text. "
# Nonces are shuffles of a fixed multiset of the unit's words: tokenizers split on whitespace
# before merging, so every order has the same token count (single letters did not: " i" and " q"
# are two tokens in a small BPE vocabulary). 18!/(3!^6) = 1.4e11 orders.
NONCE_WORDS: tuple[str, ...] = tuple(UNIT.replace(".", "").split()) * 3
# Differently drawn nonces must tokenize alike for the calibration to hold; this many are compared.
NONCE_SAMPLES = 3

Counter = Callable[[int], Awaitable[int]]


class CalibrationError(RuntimeError):
    """The server could not count prompt tokens by any method."""


class EndpointUnreachable(CalibrationError):
    """No answer at all (connection refused, unknown host, timeout): no other method can help."""


def _reached(backend: Backend, status: int | None, answer: Any) -> None:
    """Raise EndpointUnreachable when a request got no HTTP answer (post_json's status None)."""
    if status is None:
        raise EndpointUnreachable(f"cannot connect to {backend.connection.endpoint} ({answer})")


def make_nonce(rng: random.Random) -> str:
    """A random prompt prefix that breaks prefix-cache reuse, always of the same token count."""
    words = list(NONCE_WORDS)
    rng.shuffle(words)
    return "Nonce:" + "".join(" " + word for word in words) + ".\n"


def unique_nonces(rng: random.Random) -> Iterator[str]:
    """Nonces that never repeat within one iterator (a repeat would hit the prefix cache)."""
    seen: set[str] = set()
    while True:
        nonce = make_nonce(rng)
        if nonce not in seen:
            seen.add(nonce)
            yield nonce


def build_prompt(repetitions: int, nonce: str = "") -> str:
    """The benchmark prompt: an optional nonce, then the unit sentence repeated."""
    return nonce + UNIT * repetitions


async def search_repetitions(count: Counter, target: int) -> tuple[int, int, int]:
    """Largest repetitions r >= 1 with count(r) <= target (r = 1 if even that is over).

    Returns (repetitions, tokens, calls). Doubling finds an upper bound, bisection the boundary;
    count must be non-decreasing in r.
    """
    calls = 0
    cache: dict[int, int] = {}

    async def measured(reps: int) -> int:
        nonlocal calls
        if reps not in cache:
            calls += 1
            cache[reps] = await count(reps)
        return cache[reps]

    low = 1
    if await measured(low) >= target:
        return low, cache[low], calls
    high = 2
    while await measured(high) <= target:
        low, high = high, high * 2
    # Invariant: count(low) <= target < count(high).
    while high - low > 1:
        middle = (low + high) // 2
        if await measured(middle) <= target:
            low = middle
        else:
            high = middle
    return low, cache[low], calls


def _messages(prompt: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}]


def tokenize_body(backend: Backend, messages: list[dict[str, str]]) -> dict[str, object]:
    """A /tokenize body counting `messages` as the server counts the request's prompt: with the chat
    template and generation prompt (chat), or the last message's text alone (/v1/completions)."""
    if backend.api == "completions":
        return {"model": backend.model, "prompt": messages[-1]["content"]}
    return {"model": backend.model, "messages": messages, "add_generation_prompt": True}


def _tokenize_counter(backend: Backend, nonce: str) -> Counter:
    async def count(reps: int) -> int:
        body = tokenize_body(backend, _messages(build_prompt(reps, nonce)))
        status, answer = await backend.post_json("/tokenize", body)
        _reached(backend, status, answer)
        count = answer.get("count") if isinstance(answer, dict) else None
        if status != 200 or not isinstance(count, int):
            raise CalibrationError(f"/tokenize answered {status}: {str(answer)[:200]}")
        return count

    return count


def _usage_counter(backend: Backend, nonce: str, seed: int) -> Counter:
    async def count(reps: int) -> int:
        body = backend.chat_body(build_prompt(reps, nonce), max_tokens=1, seed=seed, cache_salt=None, stream=False)
        body.pop("ignore_eos")
        status, answer = await backend.post_json(COMPLETION_PATHS[backend.api], body)
        _reached(backend, status, answer)
        try:
            return int(answer["usage"]["prompt_tokens"])
        except (TypeError, KeyError, ValueError) as exc:
            raise CalibrationError(f"probe request answered {status} without usage.prompt_tokens: {str(answer)[:200]}") from exc

    return count


async def calibrate(
    backend: Backend, target: int, salt_mode: SaltMode, seed: int, *, memo: dict[int, int] | None = None
) -> Calibration:
    """Size the prompt for `target` tokens on this server (with a nonce prefix in prompt-nonce mode);
    `memo` (repetitions -> tokens, no nonce) is shared by the calibrations of many lengths."""
    rng = random.Random(seed)
    nonce = make_nonce(rng) if salt_mode == "prompt-nonce" else ""
    shared = None if nonce else memo  # counts without the nonce only
    warnings: list[str] = []
    method: CalibrationMethod = "tokenize"
    try:
        reps, tokens, calls = await search_repetitions(_remembered(_counter(backend, method, nonce, seed), shared), target)
    except EndpointUnreachable:
        raise
    except CalibrationError as exc:
        warnings.append(f"/tokenize unusable ({exc}); calibrated from usage.prompt_tokens of probe requests")
        method = "usage"
        reps, tokens, calls = await search_repetitions(_remembered(_counter(backend, method, nonce, seed), shared), target)
    nonce_tokens = None
    if nonce:
        plain = await _counter(backend, method, "", seed)(reps)
        nonce_tokens = tokens - plain
        calls += 1
        for _ in range(NONCE_SAMPLES - 1):
            other = await _counter(backend, method, make_nonce(rng), seed)(reps)
            calls += 1
            if other != tokens:
                warnings.append(f"nonces tokenize to different lengths ({tokens} vs {other}): prompt_tokens will vary")
    if tokens > target:
        warnings.append(f"the chat template alone exceeds the target: {tokens} tokens for 1 repetition")
    return Calibration(
        target_tokens=target,
        actual_tokens=tokens,
        repetitions=reps,
        method=method,
        unit=UNIT,
        nonce_tokens=nonce_tokens,
        probes=calls,
        warnings=warnings,
    )


def _remembered(count: Counter, memo: dict[int, int] | None) -> Counter:
    """A counter that asks the server only for repetitions not in `memo` (None: no memo)."""
    if memo is None:
        return count

    async def remembered(reps: int) -> int:
        if reps not in memo:
            memo[reps] = await count(reps)
        return memo[reps]

    return remembered


def _counter(backend: Backend, method: CalibrationMethod, nonce: str, seed: int) -> Counter:
    if method == "tokenize":
        return _tokenize_counter(backend, nonce)
    return _usage_counter(backend, nonce, seed)
