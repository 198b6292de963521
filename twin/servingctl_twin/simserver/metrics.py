"""Prometheus text exposition of the simulator's counters under vLLM V1's metric names.

Same shape as vLLM (prometheus_client): counters exposed with a ``_total`` suffix, labels
``engine`` and ``model_name``, ``request_success_total`` split by ``finished_reason`` and the
per-position draft acceptance by ``position``.
"""

from __future__ import annotations

import json

from servingctl_twin.simserver.scheduler import Scheduler


def _family(name: str, kind: str, doc: str, samples: list[tuple[str, float]]) -> str:
    lines = [f"# HELP {name} {doc}", f"# TYPE {name} {kind}"]
    lines.extend(f"{name}{{{labels}}} {float(value)!r}" for labels, value in samples)
    return "\n".join(lines)


def render(scheduler: Scheduler, model: str, still_streaming: int = 0) -> str:
    """The /metrics body; `still_streaming`: requests the engine finished that are still being
    written out at a GPU server's pace (--pace-ms), counted as running."""
    base = f'engine="0",model_name={json.dumps(model)}'
    c = scheduler.counters
    cache = scheduler.prefix_cache
    families: list[tuple[str, str, str, list[tuple[str, float]]]] = [
        (
            "vllm:num_requests_running",
            "gauge",
            "Number of requests in model execution batches.",
            [(base, len(scheduler.running) + still_streaming)],
        ),
        ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", [(base, len(scheduler.waiting))]),
        (
            "vllm:prefix_cache_queries_total",
            "counter",
            "Prefix cache queries, in terms of number of queried tokens.",
            [(base, cache.queries)],
        ),
        (
            "vllm:prefix_cache_hits_total",
            "counter",
            "Prefix cache hits, in terms of number of cached tokens.",
            [(base, cache.hits)],
        ),
        ("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", [(base, c.prompt_tokens)]),
        ("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", [(base, c.generation_tokens)]),
        (
            "vllm:request_success_total",
            "counter",
            "Count of successfully processed requests.",
            [(f'{base},finished_reason="{reason}"', n) for reason, n in c.success.items()],
        ),
    ]
    if scheduler.mtp_tokens:
        families += [
            ("vllm:spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.", [(base, c.num_drafts)]),
            ("vllm:spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens.", [(base, c.num_draft_tokens)]),
            (
                "vllm:spec_decode_num_accepted_tokens_total",
                "counter",
                "Number of accepted tokens.",
                [(base, c.num_accepted_tokens)],
            ),
            (
                "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                "counter",
                "Accepted tokens per draft position.",
                [(f'{base},position="{pos}"', n) for pos, n in enumerate(c.accepted_per_pos)],
            ),
        ]
    return "\n".join(_family(*family) for family in families) + "\n"
