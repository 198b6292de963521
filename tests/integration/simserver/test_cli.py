"""The simulator's command line: `servingctl local simserver` flags and `python -m` serving for real."""

import socket
import subprocess
import sys
import time

import httpx
import pytest

from servingctl.cli.main import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--fault", "slow-start=1"], "--fault 'slow-start=1': expected NAME=VALUE with NAME one of: error-rate"),
        (["--fault", "stream-cut=2"], "--fault stream-cut: 2.0 out of range"),
        (["--speed", "0"], "--speed: Input should be greater than 0"),
        (["--max-num-seqs", "0"], "--max-num-seqs: Input should be greater than or equal to 1"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(capsys, argv, message):
    assert main(["local", "simserver", *argv]) == 2
    assert message in capsys.readouterr().err


def test_python_m_serves_with_the_same_flags():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "servingctl.local.simserver", "--port", str(port), "--speed", "50",
         "--model", "tiny", "--mtp-tokens", "0", "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        assert httpx.get(f"{url}/v1/models").json()["data"][0]["id"] == "tiny"
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
        assert httpx.post(f"{url}/v1/chat/completions", json=body).json()["usage"]["completion_tokens"] == 8
        assert "spec_decode" not in httpx.get(f"{url}/metrics").text  # --mtp-tokens 0: no drafts
    finally:
        proc.terminate()
        proc.wait(10)
