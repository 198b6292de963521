"""Simulator model server: an OpenAI-compatible streaming server that times itself like vLLM.

``python -m servingctl_twin.simserver`` (or ``servingctl local simserver``) runs it; tests use
``run_in_thread`` / ``running``. It says it is a simulator on ``/version``, never a GPU.

The names below load with their module on first use: ``servingctl local ...`` reads the
simulator's flags (simserver.command) without importing the server (FastAPI, uvicorn: about a
second) unless it serves.
"""

from __future__ import annotations

import importlib
from typing import Any

# exported name -> the module that defines it
_EXPORTS = {
    "SIMULATOR_VERSION": "app",
    "create_app": "app",
    "FaultError": "config",
    "Faults": "config",
    "SimConfig": "config",
    "parse_faults": "config",
    "run_in_thread": "server",
    "running": "server",
    "serve": "server",
    "REFERENCE_TIMING": "timing",
    "TimingModel": "timing",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """The exported name, imported from its module on first use."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
