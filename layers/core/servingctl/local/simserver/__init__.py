"""Simulator model server: an OpenAI-compatible streaming server that times itself like vLLM.

``python -m servingctl.local.simserver`` (or ``servingctl local simserver``) runs it; tests use
``run_in_thread`` / ``running``. It says it is a simulator on ``/version``, never a GPU.
"""

from servingctl.local.simserver.app import SIMULATOR_VERSION, create_app
from servingctl.local.simserver.config import FaultError, Faults, SimConfig, parse_faults
from servingctl.local.simserver.server import run_in_thread, running, serve
from servingctl.local.simserver.timing import REFERENCE_TIMING, TimingModel

__all__ = [
    "REFERENCE_TIMING",
    "SIMULATOR_VERSION",
    "FaultError",
    "Faults",
    "SimConfig",
    "TimingModel",
    "create_app",
    "parse_faults",
    "run_in_thread",
    "running",
    "serve",
]
