"""The simulator's tokenizer, chat template and generated text.

Deterministic and cheap: a token is a word or a punctuation mark; ids are stable hashes. The chat
template adds the same special tokens a real template does (BOS, a role marker and an end marker per
message, an assistant marker for the generation prompt), so ``/tokenize`` with messages and
``add_generation_prompt`` counts exactly what a chat request reports as ``usage.prompt_tokens``.
Generated text comes from a fixed pool of token texts, a few of which decode to no text (like a
partial multi-byte token), so a stream can have fewer chunks than tokens.
"""

from __future__ import annotations

import random
import re
import zlib
from collections.abc import Sequence
from typing import Literal, get_args

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")
VOCAB_SIZE = 32000
BOS = 1
EOT = 2
ASSISTANT = 3
Role = Literal["system", "user", "assistant", "tool", "developer"]
ROLE_IDS: dict[str, int] = {role: 4 + i for i, role in enumerate(get_args(Role))}  # system 4 ... developer 8
SPECIAL = 16  # ids below this are special tokens

_WORDS = [
    "the",
    "model",
    "answers",
    "with",
    "plain",
    "words",
    "while",
    "the",
    "simulator",
    "keeps",
    "time",
    "like",
    "a",
    "real",
    "engine",
    "on",
    "two",
    "GPUs",
    "and",
    "every",
    "step",
    "streams",
    "one",
    "chunk",
    "of",
    "text",
    "to",
    "the",
    "client",
    "so",
    "benchmarks",
    "can",
    "count",
    "tokens",
    "exactly",
    "serving",
    "cost",
    "latency",
    "throughput",
    "cache",
    "batch",
    "decode",
    "prefill",
    "draft",
    "accepted",
]
_PUNCT = (",", ".", ";", ":", "!", "?")
EMPTY_TOKEN_RATE = 0.04
_POOL_SIZE = 8192


def _token_id(piece: str) -> int:
    return SPECIAL + zlib.crc32(piece.encode()) % (VOCAB_SIZE - SPECIAL)


def encode(text: str) -> list[int]:
    """Token ids of plain text (no special tokens)."""
    return [_token_id(piece) for piece in _TOKEN_RE.findall(text)]


def encode_prompt(prompt: str, add_special_tokens: bool = True) -> list[int]:
    """Token ids of a completion-style prompt (BOS first, like vLLM's default)."""
    return ([BOS] if add_special_tokens else []) + encode(prompt)


def apply_chat_template(messages: Sequence[dict[str, str]], add_generation_prompt: bool) -> list[int]:
    """Token ids of a conversation: BOS, then per message role marker + content + end marker."""
    ids = [BOS]
    for message in messages:
        ids.append(ROLE_IDS[message["role"]])
        ids.extend(encode(message["content"]))
        ids.append(EOT)
    if add_generation_prompt:
        ids.append(ASSISTANT)
    return ids


def _build_pool() -> tuple[str, ...]:
    rng = random.Random(0)
    pool = []
    for _ in range(_POOL_SIZE):
        roll = rng.random()
        if roll < EMPTY_TOKEN_RATE:
            pool.append("")
        elif roll < 0.12:
            pool.append(rng.choice(_PUNCT))
        else:
            pool.append(" " + rng.choice(_WORDS))
    return tuple(pool)


TOKEN_TEXTS = _build_pool()


def generated_text(offset: int, start: int, count: int) -> str:
    """Text of generated tokens ``start .. start+count`` of a request whose pool offset is ``offset``."""
    base = offset + start
    return "".join(TOKEN_TEXTS[(base + i) % _POOL_SIZE] for i in range(count))
