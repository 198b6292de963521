"""Starts, health-checks and stops a local model server process (real vLLM on CPU or the simulator).

Owns the process handling shared by the e2e tests, the local twin and the demo. vLLM runs in its own
venv (python 3.11), so this module never imports it: it only builds the command line and manages the
process group (vLLM forks an engine process that must die with it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

import httpx

# twin/servingctl_twin/modelserver.py -> the repository root (an editable install).
_REPO_ROOT = Path(__file__).resolve().parents[2]

VLLM_PYTHON_ENV = "SERVINGCTL_VLLM_PYTHON"
TINY_MODEL_ENV = "SERVINGCTL_TINY_MODEL"

# What FACTS.md section 3 found to work for vLLM 0.32 on CPU: 1 GiB KV cache, no hub, no telemetry.
VLLM_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
VLLM_FLAGS = ("--dtype", "float32", "--enforce-eager", "--max-model-len", "2048")
# The local model server stands in for a GPU host of its own, but shares this machine's cores with
# the benchmark client and the twin. vLLM on CPU keeps the cores it runs on busy while it generates,
# which woke a client's event loop up to 550 ms late (`make demo`, a 2-core machine). So vLLM gets
# every core but the last and the client keeps that one, as on AWS it has a host of its own.


def model_server_cpus() -> set[int] | None:
    """The cores a local vLLM gets: all of this process's but the last (None with a single core)."""
    cpus = sorted(os.sched_getaffinity(0))
    return set(cpus[:-1]) if len(cpus) > 1 else None


class ModelServerError(RuntimeError):
    """The model server exited or never became healthy; the message carries its log tail."""


class ModelServerProcess:
    """One model server process in its own process group, with its output captured to a log file."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        port: int,
        served_model_name: str,
        env: Mapping[str, str] | None = None,
        log_path: str | Path | None = None,
        host: str = "127.0.0.1",
        health_path: str = "/health",
        cpus: set[int] | None = None,
    ) -> None:
        self.argv = list(argv)
        self.port = port
        self.model = served_model_name
        self.env = dict(os.environ if env is None else env)
        self.log_path = Path(log_path) if log_path else None
        self.host = host
        self.health_path = health_path
        self.cpus = cpus
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Base URL of the server (no trailing slash)."""
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """Process id of the server (also its process group id), None before start()."""
        return self._proc.pid if self._proc else None

    @property
    def running(self) -> bool:
        """True while the server's main process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> ModelServerProcess:
        """Launch the process in a new session (own process group), output to the log file."""
        if self._proc is not None:
            raise ModelServerError(f"{self.model} on {self.url} was already started")
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix=f"modelserver-{self.port}-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        if self.cpus:  # before vLLM forks its engine (seconds of imports later): the children inherit it
            os.sched_setaffinity(self._proc.pid, self.cpus)
        return self

    def wait_healthy(self, timeout_s: float = 300.0, poll_s: float = 0.5) -> float:
        """Block until GET health_path answers 200; return the seconds waited.

        Raises ModelServerError with the log tail when the process exits or the timeout passes.
        """
        if self._proc is None:
            raise ModelServerError(f"{self.model} on {self.url} was never started")
        started = time.monotonic()
        deadline = started + timeout_s
        # trust_env off: a user's HTTP(S)_PROXY must not capture a loopback health check.
        with httpx.Client(timeout=min(5.0, max(poll_s, 1.0)), trust_env=False) as client:
            while True:
                code = self._proc.poll()
                if code is not None:
                    raise ModelServerError(
                        f"{self.model} on {self.url} exited with code {code} before it was healthy; "
                        f"log {self.log_path} ends with:\n{self.log_tail()}"
                    )
                try:
                    if client.get(self.url + self.health_path).status_code == 200:
                        return time.monotonic() - started
                except httpx.HTTPError:
                    pass  # not listening yet
                if time.monotonic() >= deadline:
                    raise ModelServerError(
                        f"{self.model} on {self.url} not healthy after {timeout_s:.0f} s; "
                        f"log {self.log_path} ends with:\n{self.log_tail()}"
                    )
                time.sleep(poll_s)

    def stop(self, grace_s: float = 15.0) -> int | None:
        """SIGTERM the whole process group, SIGKILL what is left after grace_s; return the exit code."""
        if self._proc is None:
            return None
        pgid = self._proc.pid  # start_new_session: the leader's pid is the group id
        _signal_group(pgid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=grace_s)
        # Children (vLLM's engine core) may outlive a leader that exited or ignored SIGTERM.
        _signal_group(pgid, signal.SIGKILL)
        return self._proc.wait()

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the server's log (empty before start)."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        with self.log_path.open("r", encoding="utf-8", errors="replace") as log:
            return "".join(deque(log, maxlen=lines))

    def __enter__(self) -> ModelServerProcess:
        """Start the server (not waiting for health: call wait_healthy())."""
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the server, whatever happened inside the block."""
        self.stop()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send sig to a process group that may already be gone."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def vllm_python() -> Path:
    """Python of the vLLM venv: $SERVINGCTL_VLLM_PYTHON, else the repository's .venv-vllm."""
    return Path(os.environ.get(VLLM_PYTHON_ENV) or _REPO_ROOT / ".venv-vllm" / "bin" / "python")


def tiny_model_dir() -> Path:
    """The tiny local model: $SERVINGCTL_TINY_MODEL, else the repository's .cache/tiny-llama."""
    return Path(os.environ.get(TINY_MODEL_ENV) or _REPO_ROOT / ".cache" / "tiny-llama")


def draft_model_dir() -> Path:
    """The copy of the tiny model used as the speculative-decoding draft (built beside it)."""
    model = tiny_model_dir()
    return model.with_name(model.name + "-draft")


def vllm_available() -> bool:
    """True when the vLLM venv's python and the tiny model (with its draft copy) are built."""
    return (
        vllm_python().is_file() and (tiny_model_dir() / "config.json").is_file() and (draft_model_dir() / "config.json").is_file()
    )


def vllm_server(
    model_dir: str | Path,
    port: int,
    *,
    served_model_name: str,
    extra_args: Sequence[str] = (),
    python: str | Path | None = None,
    log_path: str | Path | None = None,
    host: str = "127.0.0.1",
    env: Mapping[str, str] | None = None,
) -> ModelServerProcess:
    """A real vLLM OpenAI-compatible server on CPU for model_dir (a directory, or s3:// with the
    streamer's arguments), listening on host:port (not started yet); env adds to its environment."""
    argv = [
        str(python or vllm_python()),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        served_model_name,
        "--host",
        host,
        "--port",
        str(port),
        *VLLM_FLAGS,
        *extra_args,
    ]
    cpus = model_server_cpus()
    # vLLM binds its OpenMP threads itself: to the same cores, or it would spread them over all.
    bind = {"VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, sorted(cpus)))} if cpus else {}
    return ModelServerProcess(
        argv,
        port=port,
        served_model_name=served_model_name,
        env={**os.environ, **VLLM_ENV, **bind, **(env or {})},
        log_path=log_path,
        cpus=cpus,
        host=host,
    )


def simulator_server(
    port: int,
    *,
    served_model_name: str,
    speed: float = 1.0,
    faults: Sequence[str] = (),
    log_path: str | Path | None = None,
    host: str = "127.0.0.1",
) -> ModelServerProcess:
    """The simulator model server (servingctl_twin.simserver) in this python, on host:port (not started yet)."""
    argv = [
        sys.executable,
        "-m",
        "servingctl_twin.simserver",
        "--host",
        host,
        "--port",
        str(port),
        "--model",
        served_model_name,
        "--speed",
        str(speed),
    ]
    for fault in faults:
        argv += ["--fault", fault]
    return ModelServerProcess(argv, port=port, served_model_name=served_model_name, log_path=log_path, host=host)
