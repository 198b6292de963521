"""Calibration: doubling + bisection against a fake token counter, /tokenize and its usage fallback."""

import asyncio
import json
import random
from itertools import islice

import httpx
import pytest

from servingctl.loadgen.backend import Backend, Connection
from servingctl.loadgen.calibration import UNIT, CalibrationError, build_prompt, calibrate, search_repetitions, unique_nonces

# A fake tokenizer: 5 template tokens + 9 tokens per repetition (the unit sentence's length in
# DeepSeek's tokenizer is close to this).
TEMPLATE, PER_REP = 5, 9


def fake_count(calls: list[int]):
    async def count(reps: int) -> int:
        calls.append(reps)
        return TEMPLATE + PER_REP * reps

    return count


@pytest.mark.parametrize(
    ("target", "reps", "tokens"),
    [(256, 27, 248), (2048, 227, 2048), (8192, 909, 8186), (14, 1, 14), (23, 2, 23)],
)
def test_search_finds_the_largest_prompt_not_over_target(target, reps, tokens):
    # by hand: reps = floor((target - 5) / 9); e.g. 256 -> 27 -> 5 + 243 = 248, 2048 -> 227 -> 2048
    calls: list[int] = []
    assert asyncio.run(search_repetitions(fake_count(calls), target))[:2] == (reps, tokens)
    assert len(calls) == len(set(calls))  # never asks the server twice for the same prompt


def test_search_doubles_then_bisects():
    calls: list[int] = []
    asyncio.run(search_repetitions(fake_count(calls), 256))
    assert calls[:6] == [1, 2, 4, 8, 16, 32]  # doubling until 32 reps (293 tokens) > 256
    assert calls[6:] == [24, 28, 26, 27]  # bisection between 16 and 32


def test_target_below_the_template_returns_one_repetition():
    assert asyncio.run(search_repetitions(fake_count([]), 3))[:2] == (1, 14)


def server(tokenize_status=200):
    """A fake vLLM: /tokenize counts like the fake tokenizer; chat answers usage.prompt_tokens."""
    seen: list[dict] = []

    def tokens(messages) -> int:
        return TEMPLATE + PER_REP * messages[0]["content"].count(UNIT) + (8 if messages[0]["content"].startswith("Nonce") else 0)

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append({"path": request.url.path, **body})
        if request.url.path == "/tokenize":
            if tokenize_status != 200:
                return httpx.Response(tokenize_status, json={"detail": "Not Found"})
            assert body["add_generation_prompt"] is True
            return httpx.Response(200, json={"count": tokens(body["messages"]), "tokens": []})
        return httpx.Response(
            200, json={"choices": [], "usage": {"prompt_tokens": tokens(body["messages"]), "completion_tokens": 1}}
        )

    return httpx.MockTransport(handler), seen


def calibrated(transport, target=256, salt_mode="cache-salt"):
    async def go():
        async with Backend(Connection("http://s"), "m", max_connections=1, transport=transport) as backend:
            return await calibrate(backend, target, salt_mode, seed=42)

    return asyncio.run(go())


def test_calibrate_with_tokenize():
    transport, seen = server()
    c = calibrated(transport)
    assert (c.target_tokens, c.actual_tokens, c.repetitions, c.method) == (256, 248, 27, "tokenize")
    assert c.probes == 10 and c.warnings == []
    assert all(s["path"] == "/tokenize" for s in seen)


def test_calibrate_falls_back_to_probe_requests_without_tokenize():
    transport, seen = server(tokenize_status=404)
    c = calibrated(transport)
    assert (c.actual_tokens, c.repetitions, c.method) == (248, 27, "usage")
    assert "/tokenize unusable" in c.warnings[0]
    probes = [s for s in seen if s["path"] == "/v1/chat/completions"]
    assert probes and all(p["max_tokens"] == 1 and p["stream"] is False for p in probes)


def test_prompt_nonce_is_inside_the_calibrated_count():
    transport, _ = server()
    c = calibrated(transport, salt_mode="prompt-nonce")
    # 8 nonce tokens: 5 + 8 + 27 x 9 = 256 <= 256
    assert (c.actual_tokens, c.repetitions, c.nonce_tokens) == (256, 27, 8)
    assert c.warnings == []


def test_calibration_error_when_nothing_can_count():
    def broken(request):
        return httpx.Response(500, text="boom")

    with pytest.raises(CalibrationError, match="prompt_tokens"):
        calibrated(httpx.MockTransport(broken))


def test_prompt_is_the_unit_repeated_after_the_nonce():
    assert build_prompt(2, "Nonce a.\n") == "Nonce a.\n" + UNIT + UNIT


def test_nonces_are_unique_word_shuffles_of_one_multiset():
    nonces = list(islice(unique_nonces(random.Random(7)), 500))
    assert len(set(nonces)) == 500
    assert len({tuple(sorted(n.rstrip(".\n").split())) for n in nonces}) == 1  # same words, different order
