"""Session fixtures for end-to-end tests: the real vLLM on CPU serving the tiny local model.

Every server the selected tests ask for is launched at once when the session's first test starts,
and the twin's test (which starts a vLLM of its own) runs first: a vLLM start-up on CPU keeps the
cores only half busy, so overlapping the three start-ups cuts minutes off the suite. Servers stop at
the end of the session. Without the vLLM venv and the tiny model (`make vllm` builds them) the tests
skip, or fail when SERVINGCTL_REQUIRE_VLLM=1 (as in `make test`), so a missing install never passes
as green.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from servingctl_twin import modelserver
from servingctl_twin.modelserver import ModelServerProcess, draft_model_dir, free_port, tiny_model_dir, vllm_available
from servingctl_twin.twin import Twin

E2E_DIR = Path(__file__).resolve().parent
TINY_MODEL_NAME = "tiny-llama"
TINY_SPEC_MODEL_NAME = "tiny-llama-spec"
SPECULATIVE_TOKENS = 3
# vLLM on 2 CPU cores is healthy in 20-50 s; leave room for a loaded CI machine.
STARTUP_TIMEOUT_S = 300.0


# The session servers by fixture name: served model name and extra vLLM arguments.
_SERVERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "vllm_server": (TINY_MODEL_NAME, ()),
    "vllm_spec_server": (
        TINY_SPEC_MODEL_NAME,
        (
            "--speculative-config",
            json.dumps({"method": "draft_model", "model": str(draft_model_dir()), "num_speculative_tokens": SPECULATIVE_TOKENS}),
        ),
    ),
}
_NEEDED = pytest.StashKey[set[str]]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test under tests/e2e with `e2e`; run the twin's test first; note the servers needed."""
    for item in items:
        if E2E_DIR in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.e2e)
    items.sort(key=lambda item: 0 if "twin" in getattr(item, "fixturenames", ()) else 1)
    config.stash[_NEEDED] = {name for item in items for name in getattr(item, "fixturenames", ()) if name in _SERVERS}


def _require_vllm() -> None:
    if vllm_available():
        return
    message = (
        f"real vLLM not built (python {os.environ.get('SERVINGCTL_VLLM_PYTHON', '.venv-vllm')}, "
        f"model {tiny_model_dir()}): run `make vllm`"
    )
    if os.environ.get("SERVINGCTL_REQUIRE_VLLM") == "1":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session", autouse=True)
def _vllm_fleet(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, ModelServerProcess]]:
    """Launch every session server the selected tests need, without waiting for health."""
    fleet: dict[str, ModelServerProcess] = {}
    needed = request.config.stash.get(_NEEDED, set())
    if needed and vllm_available():
        for fixture in sorted(needed):
            name, extra_args = _SERVERS[fixture]
            fleet[fixture] = modelserver.vllm_server(
                tiny_model_dir(),
                free_port(),
                served_model_name=name,
                extra_args=extra_args,
                log_path=tmp_path_factory.mktemp(name) / "vllm.log",
            ).start()
    try:
        yield fleet
    finally:
        for server in fleet.values():
            server.stop()


def _healthy(fleet: dict[str, ModelServerProcess], fixture: str) -> ModelServerProcess:
    _require_vllm()
    server = fleet[fixture]
    server.wait_healthy(STARTUP_TIMEOUT_S)
    return server


@pytest.fixture(scope="session")
def vllm_server(_vllm_fleet: dict[str, ModelServerProcess]) -> ModelServerProcess:
    """Real vLLM serving the tiny model as "tiny-llama" (`.url`, `.model`)."""
    return _healthy(_vllm_fleet, "vllm_server")


@pytest.fixture(scope="session")
def vllm_spec_server(_vllm_fleet: dict[str, ModelServerProcess]) -> ModelServerProcess:
    """Real vLLM with draft-model speculative decoding (3 tokens), served as "tiny-llama-spec"."""
    return _healthy(_vllm_fleet, "vllm_spec_server")


def twin_dynamodb(twin: Twin) -> Any:
    """A DynamoDB resource on the twin's endpoint (its tables: the state, the benchmark records)."""
    return boto3.resource(
        "dynamodb",
        endpoint_url=twin.endpoint_url,
        region_name=twin.region,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
