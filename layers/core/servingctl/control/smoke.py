"""Smoke test of a serving endpoint through the ALB: /health answers and /v1/models lists the model."""

from __future__ import annotations

from typing import Any

import httpx

from servingctl.shared.errors import SmokeTestFailed
from servingctl.shared.settings import SmokeTarget


def smoke_test(target: SmokeTarget, client: httpx.Client) -> dict[str, Any]:
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
    return {"ok": True, "detail": f"/health 200, /v1/models lists {target.model}", "models": models}
