"""Process handling of servingctl_twin.modelserver with small real child processes."""

from __future__ import annotations

import os
import socket
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from servingctl_twin import modelserver
from servingctl_twin.modelserver import ModelServerError, ModelServerProcess, free_port

# A server whose /health answers 200 and that prints one line when it listens.
HEALTHY_SERVER = textwrap.dedent(
    """
    import http.server, sys
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
        def log_message(self, *args):
            pass
    server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    print("listening", flush=True)
    server.serve_forever()
    """
)

# A leader that ignores SIGTERM and forks a grandchild, like vLLM's api server and engine core.
STUBBORN_GROUP = textwrap.dedent(
    """
    import signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    print(f"child {child.pid}", flush=True)
    time.sleep(300)
    """
)


def _alive(pid: int) -> bool:
    """True unless the pid is gone or a zombie (nothing reaps orphans in some containers)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_for_log(server: ModelServerProcess, text: str, timeout_s: float = 10.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in (log := server.log_tail()):
            return log
        time.sleep(0.05)
    raise AssertionError(f"{text!r} never appeared in {server.log_tail()!r}")


def test_wait_healthy_returns_once_health_answers(tmp_path: Path) -> None:
    port = free_port()
    server = ModelServerProcess(
        [sys.executable, "-c", HEALTHY_SERVER, str(port)],
        port=port,
        served_model_name="m",
        log_path=tmp_path / "server.log",
    )
    with server:
        waited = server.wait_healthy(timeout_s=30, poll_s=0.05)
        assert waited >= 0
        assert httpx.get(server.url + "/health").status_code == 200
        assert "listening" in server.log_tail()
    assert not server.running


def test_wait_healthy_reports_exit_code_and_log_tail(tmp_path: Path) -> None:
    script = "import sys; print('error: unknown flag --bogus'); sys.exit(3)"
    server = ModelServerProcess(
        [sys.executable, "-c", script], port=free_port(), served_model_name="m", log_path=tmp_path / "l.log"
    )
    with server, pytest.raises(ModelServerError) as info:
        server.wait_healthy(timeout_s=30, poll_s=0.05)
    assert "exited with code 3" in str(info.value)
    assert "error: unknown flag --bogus" in str(info.value)


def test_wait_healthy_times_out_with_log_tail() -> None:
    script = "import time; print('loading weights', flush=True); time.sleep(60)"
    server = ModelServerProcess([sys.executable, "-c", script], port=free_port(), served_model_name="m")
    with server:
        _wait_for_log(server, "loading weights")
        with pytest.raises(ModelServerError) as info:
            server.wait_healthy(timeout_s=0.5, poll_s=0.05)
    assert "not healthy after" in str(info.value)
    assert "loading weights" in str(info.value)
    assert not server.running


def test_stop_kills_the_whole_process_group_after_grace() -> None:
    server = ModelServerProcess([sys.executable, "-c", STUBBORN_GROUP], port=free_port(), served_model_name="m")
    server.start()
    child = int(_wait_for_log(server, "child ").split("child ")[1].split()[0])
    leader = server.pid
    assert leader is not None and _alive(leader) and _alive(child)

    code = server.stop(grace_s=0.3)

    assert code == -9  # SIGTERM was ignored, so the leader had to be killed
    assert not _alive(leader)
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def test_stop_is_safe_before_start_and_twice() -> None:
    server = ModelServerProcess([sys.executable, "-c", "pass"], port=free_port(), served_model_name="m")
    assert server.stop() is None
    server.start()
    assert server.stop() == server.stop()


def test_start_twice_is_refused() -> None:
    server = ModelServerProcess([sys.executable, "-c", "import time; time.sleep(30)"], port=free_port(), served_model_name="m")
    with server, pytest.raises(ModelServerError, match="already started"):
        server.start()


def test_vllm_server_command_and_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SERVINGCTL_VLLM_PYTHON", "/opt/vllm/bin/python")
    server = modelserver.vllm_server(tmp_path, 8123, served_model_name="tiny", extra_args=("--seed", "7"))
    argv = server.argv
    assert argv[:3] == ["/opt/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--model") + 1] == str(tmp_path)
    assert argv[argv.index("--served-model-name") + 1] == "tiny"
    assert argv[argv.index("--port") + 1] == "8123"
    assert argv[argv.index("--dtype") + 1] == "float32"
    assert "--enforce-eager" in argv
    assert argv[-2:] == ["--seed", "7"]
    assert server.env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert server.env["HF_HUB_OFFLINE"] == "1"
    assert server.url == "http://127.0.0.1:8123" and server.model == "tiny"
    explicit = modelserver.vllm_server(tmp_path, 8123, served_model_name="tiny", python="/x/python")
    assert explicit.argv[0] == "/x/python"


def test_simulator_server_command() -> None:
    server = modelserver.simulator_server(9001, served_model_name="sim", speed=20.0, faults=("stall", "error-rate=0.1"))
    assert server.argv[:3] == [sys.executable, "-m", "servingctl_twin.simserver"]
    assert server.argv[server.argv.index("--model") + 1] == "sim"
    assert server.argv[server.argv.index("--speed") + 1] == "20.0"
    assert server.argv[-4:] == ["--fault", "stall", "--fault", "error-rate=0.1"]


def test_vllm_available_follows_the_built_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    python = tmp_path / "venv" / "bin" / "python"
    model = tmp_path / "tiny-llama"
    monkeypatch.setenv("SERVINGCTL_VLLM_PYTHON", str(python))
    monkeypatch.setenv("SERVINGCTL_TINY_MODEL", str(model))
    assert not modelserver.vllm_available()
    python.parent.mkdir(parents=True)
    python.write_text("")
    for directory in (model, tmp_path / "tiny-llama-draft"):
        directory.mkdir()
        assert not modelserver.vllm_available()
        (directory / "config.json").write_text("{}")
    assert modelserver.vllm_available()
    assert modelserver.draft_model_dir() == tmp_path / "tiny-llama-draft"


def test_free_port_can_be_bound() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
    assert 0 < port < 65536


FORKS_LATER = """
import os, sys, time
time.sleep(0.3)  # vLLM forks its engine after seconds of imports
child = os.fork()
if child == 0:
    time.sleep(30)
    os._exit(0)
print("child", child, flush=True)
time.sleep(30)
"""


def test_the_model_server_and_the_children_it_forks_stay_on_their_cores(tmp_path: Path) -> None:
    first = min(os.sched_getaffinity(0))
    server = ModelServerProcess(
        [sys.executable, "-c", FORKS_LATER],
        port=free_port(),
        served_model_name="m",
        log_path=tmp_path / "server.log",
        cpus={first},
    )
    with server:
        child = int(_wait_for_log(server, "child").split("child")[1].split()[0])
        assert os.sched_getaffinity(server.pid) == os.sched_getaffinity(child) == {first}


@pytest.mark.parametrize(("cores", "server_cores"), [({0}, None), ({0, 1}, {0}), ({0, 1, 2, 3}, {0, 1, 2})])
def test_vllm_gets_every_core_but_the_last_and_binds_its_threads_to_them(monkeypatch, cores, server_cores) -> None:
    monkeypatch.setattr(modelserver.os, "sched_getaffinity", lambda pid: cores)
    server = modelserver.vllm_server("/models/tiny", free_port(), served_model_name="m", python=sys.executable)
    assert server.cpus == server_cores
    bind = server.env.get("VLLM_CPU_OMP_THREADS_BIND")
    assert bind == (",".join(map(str, sorted(server_cores))) if server_cores else None)
