"""The simulator's command line: `servingctl local simserver` flags and `python -m` serving for real."""

import httpx
import pytest

from servingctl_cli.main import main

from .conftest import served


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
    with served("--speed", "50", "--model", "tiny", "--mtp-tokens", "0", "--log-level", "warning") as (url, _):
        assert httpx.get(f"{url}/v1/models").json()["data"][0]["id"] == "tiny"
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
        assert httpx.post(f"{url}/v1/chat/completions", json=body).json()["usage"]["completion_tokens"] == 8
        assert "spec_decode" not in httpx.get(f"{url}/metrics").text  # --mtp-tokens 0: no drafts
