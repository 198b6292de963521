"""Session fixtures for end-to-end tests: the real vLLM on CPU serving the tiny local model.

Each server starts only when a test first asks for it and stops at the end of the session. Without
the vLLM venv and the tiny model (`make vllm` builds them) the tests skip, or fail when
SERVINGCTL_REQUIRE_VLLM=1 (as in `make test`), so a missing install never passes as green.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from servingctl.local import modelserver
from servingctl.local.modelserver import ModelServerProcess, draft_model_dir, free_port, tiny_model_dir, vllm_available

E2E_DIR = Path(__file__).resolve().parent
TINY_MODEL_NAME = "tiny-llama"
TINY_SPEC_MODEL_NAME = "tiny-llama-spec"
SPECULATIVE_TOKENS = 3
# vLLM on 2 CPU cores is healthy in 20-50 s; leave room for a loaded CI machine.
STARTUP_TIMEOUT_S = 300.0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test under tests/e2e with `e2e` (deselect with -m 'not e2e')."""
    for item in items:
        if E2E_DIR in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.e2e)


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


def _serve(
    tmp_path_factory: pytest.TempPathFactory, name: str, extra_args: Sequence[str] = ()
) -> Iterator[ModelServerProcess]:
    _require_vllm()
    server = modelserver.vllm_server(
        tiny_model_dir(),
        free_port(),
        served_model_name=name,
        extra_args=extra_args,
        log_path=tmp_path_factory.mktemp(name) / "vllm.log",
    )
    with server:
        server.wait_healthy(STARTUP_TIMEOUT_S)
        yield server


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelServerProcess]:
    """Real vLLM serving the tiny model as "tiny-llama" (`.url`, `.model`)."""
    yield from _serve(tmp_path_factory, TINY_MODEL_NAME)


@pytest.fixture(scope="session")
def vllm_spec_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelServerProcess]:
    """Real vLLM with draft-model speculative decoding (3 tokens), served as "tiny-llama-spec"."""
    config = {"method": "draft_model", "model": str(draft_model_dir()), "num_speculative_tokens": SPECULATIVE_TOKENS}
    yield from _serve(tmp_path_factory, TINY_SPEC_MODEL_NAME, ("--speculative-config", json.dumps(config)))
