"""The twin's Lambda router: each invocation runs in an execution environment of its function (a worker
process of its own), warm ones reused, with the function's configuration: its environment variables,
memory size and timeout (a handler past it is killed: Sandbox.Timedout); a worker that dies mid-
invocation answers Runtime.ExitError. In-process containers (for tests that monkeypatch handler code)
keep Powertools' parameter cache of their own, as a Lambda container (a process) does."""

from __future__ import annotations

import json
import os
import signal
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from servingctl_twin.awslambda import runtime
from servingctl_twin.awslambda.router import HandlerRouter
from servingctl_twin.awslambda.runtime import FunctionConfig

HANDLER = textwrap.dedent(
    '''
    import os
    import pathlib
    import time
    from aws_lambda_powertools.utilities import parameters
    from aws_lambda_powertools.utilities.parameters import constants

    VALUE = "as loaded"
    # What the Init phase saw: a function reads its settings once, at import.
    AT_IMPORT = os.environ.get("SERVINGCTL_TABLE")
    time.sleep(float(os.environ.get("INIT_SLEEP_S", "0")))  # a slow Init

    def lambda_handler(event, context):
        """put: cache a value as this container's provider; clear: clear_caches(); hold: wait for a file."""
        if event.get("put"):
            constants.DEFAULT_PROVIDERS["ssm"] = event["put"]
        if event.get("clear"):
            parameters.clear_caches()
        if event.get("hold"):
            while not pathlib.Path(event["hold"]).exists():
                time.sleep(0.01)
        if event.get("sleep"):
            time.sleep(event["sleep"])
        return {"seen": constants.DEFAULT_PROVIDERS.get("ssm"), "container": __name__, "pid": os.getpid(),
                "env": dict(os.environ), "memory": context.memory_limit_in_mb, "value": VALUE, "at_import": AT_IMPORT,
                "remaining_ms": context.get_remaining_time_in_millis()}
    '''
)
ENVIRONMENT = {"SERVINGCTL_TABLE": "probe-table"}


class Configs:
    """The functions' configuration as the twin reads it from Lambda (tests change it)."""

    def __init__(self) -> None:
        self.current = FunctionConfig(timeout_s=5, memory_mb=512, environment=ENVIRONMENT)

    def __call__(self, deployed_name: str) -> FunctionConfig:
        return self.current


@pytest.fixture
def configs() -> Configs:
    return Configs()


@pytest.fixture
def router(tmp_path: Path, configs: Configs) -> Iterator[HandlerRouter]:
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "app.py").write_text(HANDLER)
    made = HandlerRouter(tmp_path, "us-east-1", configs, log_dir=tmp_path / "logs")
    yield made
    made.close()
    assert made.workers("probe") == []


def _invoke(router: HandlerRouter, **event: object) -> dict[str, object]:
    body, error = router("probe", json.dumps(event).encode())
    assert error is None, body
    answer: dict[str, object] = json.loads(body)
    return answer


def _failed(router: HandlerRouter, **event: object) -> dict[str, object]:
    body, error = router("probe", json.dumps(event).encode())
    assert error == "Unhandled", body
    answer: dict[str, object] = json.loads(body)
    return answer


def _wait_for(what: str, check: object, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_an_invocation_runs_in_a_worker_process_with_the_function_configuration(router: HandlerRouter) -> None:
    os.environ["SERVINGCTL_ONLY_IN_THE_TWIN"] = "1"
    try:
        answer = _invoke(router)
    finally:
        del os.environ["SERVINGCTL_ONLY_IN_THE_TWIN"]
    assert answer["pid"] != os.getpid()
    env = answer["env"]
    assert isinstance(env, dict)
    assert env["SERVINGCTL_TABLE"] == "probe-table" and "SERVINGCTL_ONLY_IN_THE_TWIN" not in env
    assert (env["AWS_LAMBDA_FUNCTION_NAME"], env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"]) == ("probe", "512")
    assert answer["memory"] == 512
    assert 0 < int(answer["remaining_ms"]) <= 5000  # type: ignore[call-overload]


def test_a_warm_worker_serves_the_next_invocation_and_a_busy_one_gets_company(router: HandlerRouter, tmp_path: Path) -> None:
    first = _invoke(router)["pid"]
    assert _invoke(router)["pid"] == first  # warm reuse
    release = tmp_path / "release"
    held: list[dict[str, object]] = []
    thread = threading.Thread(target=lambda: held.append(_invoke(router, hold=str(release))))
    thread.start()
    _wait_for("the held invocation took the warm worker", lambda: not router._idle_workers.get("probe"))
    second = _invoke(router)["pid"]  # a concurrent invocation: a cold start of a second environment
    release.touch()
    thread.join(30)
    assert held[0]["pid"] == first and second != first
    assert len(router.workers("probe")) == 2


def test_a_handler_past_its_timeout_is_killed_and_answers_sandbox_timedout(router: HandlerRouter, configs: Configs) -> None:
    configs.current = FunctionConfig(timeout_s=1, memory_mb=128, environment=ENVIRONMENT)
    assert _invoke(router, sleep=0.3)["pid"]  # within the timeout
    [worker] = router.workers("probe")
    started = time.monotonic()
    answer = _failed(router, sleep=30)
    waited = time.monotonic() - started
    assert answer["errorType"] == "Sandbox.Timedout"
    assert str(answer["errorMessage"]).endswith("Error: Task timed out after 1.00 seconds")
    assert 1.0 <= waited < 10
    assert not worker.process.is_alive() and router.workers("probe") == []
    assert _invoke(router)["pid"] != worker.pid  # the next invocation is a cold start
    assert router.invocations[-2:] == [("probe", "Sandbox.Timedout"), ("probe", None)]


def test_an_init_past_lambdas_limit_goes_on_within_the_function_timeout(
    router: HandlerRouter, configs: Configs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lambda runs an Init past its limit again inside the invocation, under the function's timeout:
    it answers when the Init and the handler fit the timeout, Sandbox.Timedout when they do not."""
    monkeypatch.setattr(runtime, "INIT_LIMIT_S", 0.2)
    monkeypatch.setattr(runtime, "INIT_LIMIT_WALL_CLOCK_S", 0.2)  # the limit where the kernel does not account
    configs.current = FunctionConfig(timeout_s=5, memory_mb=128, environment=ENVIRONMENT | {"INIT_SLEEP_S": "1"})
    assert _invoke(router)["at_import"] == "probe-table"
    configs.current = FunctionConfig(timeout_s=1, memory_mb=128, environment=ENVIRONMENT | {"INIT_SLEEP_S": "2"})
    answer = _failed(router)
    assert answer["errorType"] == "Sandbox.Timedout"
    assert str(answer["errorMessage"]).endswith("Error: Task timed out after 1.00 seconds")
    assert router.workers("probe") == []


def test_a_worker_killed_mid_invocation_answers_runtime_exit_error(router: HandlerRouter, tmp_path: Path) -> None:
    answers: list[dict[str, object]] = []
    thread = threading.Thread(target=lambda: answers.append(_failed(router, hold=str(tmp_path / "never"))))
    thread.start()
    _wait_for("a worker started", lambda: router.workers("probe"))
    [worker] = router.workers("probe")
    time.sleep(0.5)  # inside the handler
    assert worker.pid is not None
    os.kill(worker.pid, signal.SIGKILL)
    thread.join(30)
    assert answers[0]["errorType"] == "Runtime.ExitError"
    assert str(answers[0]["errorMessage"]).endswith("Error: Runtime exited with error: signal: killed")
    assert router.workers("probe") == []


def test_a_configuration_change_retires_the_warm_workers(router: HandlerRouter, configs: Configs) -> None:
    first = _invoke(router)
    configs.current = FunctionConfig(timeout_s=5, memory_mb=1769, environment={"SERVINGCTL_TABLE": "other"})
    second = _invoke(router)
    assert second["pid"] != first["pid"] and second["memory"] == 1769
    env = second["env"]
    assert isinstance(env, dict) and env["SERVINGCTL_TABLE"] == "other"
    assert len(router.workers("probe")) == 1


def test_handler_globals_set_by_a_test_reach_every_worker(router: HandlerRouter) -> None:
    assert _invoke(router)["value"] == "as loaded"
    router.module("probe").VALUE = "moved"
    assert _invoke(router)["value"] == "moved"  # a warm worker
    with router.in_process():
        assert _invoke(router)["value"] == "moved"  # an in-process container


def test_a_container_keeps_its_cache_across_invocations(router: HandlerRouter) -> None:
    with router.in_process():
        answer = _invoke(router, put="registry-a")
        assert answer["seen"] == "registry-a" and answer["pid"] == os.getpid()
        again = _invoke(router)
        assert (again["seen"], again["container"]) == ("registry-a", answer["container"])  # the same idle container


def test_another_container_neither_sees_nor_clears_the_cache(router: HandlerRouter, tmp_path: Path) -> None:
    with router.in_process():
        first = _invoke(router)["container"]
        release = tmp_path / "release"
        answers: list[dict[str, object]] = []
        held = threading.Thread(target=lambda: answers.append(_invoke(router, put="registry-a", hold=str(release))))
        held.start()
        _wait_for("the held invocation took the first container", lambda: not any(router._idle.values()))
        # A concurrent invocation gets a second container: it sees no provider and clears only its own.
        second = _invoke(router, clear=True)
        assert (second["seen"], second["container"] != first) == (None, True)
        release.touch()
        held.join(10)
        assert (answers[0]["seen"], answers[0]["container"]) == ("registry-a", first)
        # The first container, released last, serves the next invocation: its cache survived the clear.
        last = _invoke(router)
        assert (last["seen"], last["container"]) == ("registry-a", first)


def test_the_functions_environment_is_set_before_its_module_is_imported(
    router: HandlerRouter, configs: Configs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As Lambda sets the variables before the Init phase: in a worker and in an in-process container,
    whatever the twin's own process holds; the twin's process environment is left as it was."""
    monkeypatch.setenv("SERVINGCTL_TABLE", "the-twins-own")
    assert _invoke(router)["at_import"] == "probe-table"
    with router.in_process():
        assert _invoke(router)["at_import"] == "probe-table"
        configs.current = FunctionConfig(timeout_s=5, memory_mb=512, environment={"SERVINGCTL_TABLE": "other"})
        assert _invoke(router)["at_import"] == "other"  # a new configuration: a new container, imported anew
    assert os.environ["SERVINGCTL_TABLE"] == "the-twins-own"
