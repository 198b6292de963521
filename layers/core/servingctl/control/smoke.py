"""Smoke test of a serving endpoint through the ALB: /health answers, /v1/models lists the model and
a one-token streamed chat completion gives its first token (the start timeline's first_token mark)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import httpx

from servingctl.control.state import SmokePassed
from servingctl.shared.errors import SmokeTestFailed
from servingctl.shared.flow_inputs import SmokeTarget
from servingctl.store.models import iso


def smoke_test(target: SmokeTarget, client: httpx.Client) -> SmokePassed:
    """GET /health and /v1/models with the routing header; SmokeTestFailed says what was wrong."""
    headers = {target.header_name: target.header_value}
    base = target.url.rstrip("/")
    try:
        health = client.get(f"{base}/health", headers=headers, timeout=target.timeout_s)
        if health.status_code != 200:
            raise SmokeTestFailed(f"GET {base}/health answered {health.status_code}: {health.text[:200]}")
        listed = client.get(f"{base}/v1/models", headers=headers, timeout=target.timeout_s)
    except httpx.HTTPError as exc:
        raise SmokeTestFailed(f"{type(exc).__name__} calling {base}: {exc}") from exc
    if listed.status_code != 200:
        raise SmokeTestFailed(f"GET {base}/v1/models answered {listed.status_code}: {listed.text[:200]}")
    try:
        models = [m["id"] for m in listed.json()["data"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise SmokeTestFailed(f"GET {base}/v1/models is not an OpenAI model list: {listed.text[:200]}") from exc
    if target.model not in models:
        raise SmokeTestFailed(f"model {target.model!r} is not served at {base}; /v1/models lists {models}")
    first_token_at = _first_token(target, client, base, headers)
    return SmokePassed(
        ok=True,
        detail=f"/health 200, /v1/models lists {target.model}, first token streamed",
        models=models,
        first_token_at=iso(first_token_at),
    )


def _first_token(target: SmokeTarget, client: httpx.Client, base: str, headers: dict[str, str]) -> datetime:
    """When the first streamed choice of a one-token chat completion arrived."""
    body = {"model": target.model, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 1, "stream": True}
    try:
        with client.stream("POST", f"{base}/v1/chat/completions", headers=headers, json=body, timeout=target.timeout_s) as answer:
            if answer.status_code != 200:
                raise SmokeTestFailed(f"POST {base}/v1/chat/completions answered {answer.status_code}: {answer.read()[:200]!r}")
            for line in answer.iter_lines():
                data = line.removeprefix("data:").strip()
                if line.startswith("data:") and data != "[DONE]" and json.loads(data).get("choices"):
                    return datetime.now(UTC)
    except (httpx.HTTPError, ValueError) as exc:
        raise SmokeTestFailed(f"{type(exc).__name__} streaming a completion from {base}: {exc}") from exc
    raise SmokeTestFailed(f"POST {base}/v1/chat/completions streamed no choice")
