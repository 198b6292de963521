"""The twin's Lambda router: each container keeps Powertools' parameter cache of its own, as a
Lambda container (a process) does, so one function's invocation never clears or serves another's."""

from __future__ import annotations

import json
import textwrap
import threading
import time
from pathlib import Path

from servingctl.local.twin import HandlerRouter

HANDLER = textwrap.dedent(
    '''
    import threading
    from aws_lambda_powertools.utilities import parameters
    from aws_lambda_powertools.utilities.parameters import constants

    def lambda_handler(event, context):
        """put: cache a value as this container's provider; clear: clear_caches(); hold: wait for the event."""
        if event.get("put"):
            constants.DEFAULT_PROVIDERS["ssm"] = event["put"]
        if event.get("clear"):
            parameters.clear_caches()
        if event.get("hold"):
            HOLD.wait(10)
        return {"seen": constants.DEFAULT_PROVIDERS.get("ssm"), "container": __name__}

    HOLD = threading.Event()
    '''
)


def _router(tmp_path: Path) -> HandlerRouter:
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "app.py").write_text(HANDLER)
    return HandlerRouter(tmp_path, "us-east-1")


def _invoke(router: HandlerRouter, **event: object) -> tuple[object, str]:
    """What the container that served the invocation had cached, and which container it was."""
    body, error = router("probe", json.dumps(event).encode())
    assert error is None, body
    answer = json.loads(body)
    return answer["seen"], answer["container"]


def test_a_container_keeps_its_cache_across_invocations(tmp_path: Path) -> None:
    router = _router(tmp_path)
    seen, container = _invoke(router, put="registry-a")
    assert seen == "registry-a"
    assert _invoke(router) == ("registry-a", container)  # the same (idle) container serves the next one


def test_another_container_neither_sees_nor_clears_the_cache(tmp_path: Path) -> None:
    router = _router(tmp_path)
    first = router.module("probe")  # the idle container the next invocation gets
    answers: list[tuple[object, str]] = []
    held = threading.Thread(target=lambda: answers.append(_invoke(router, put="registry-a", hold=True)))
    held.start()
    deadline = time.monotonic() + 10
    while router._idle.get("probe"):  # until the held invocation has taken the first container
        assert time.monotonic() < deadline
        time.sleep(0.01)
    # A concurrent invocation gets a second container: it sees no provider and clears only its own.
    seen, second = _invoke(router, clear=True)
    assert (seen, second != first.__name__) == (None, True)
    first.HOLD.set()
    held.join(10)
    assert answers == [("registry-a", first.__name__)]
    # The first container, released last, serves the next invocation: its cache survived the clear.
    assert _invoke(router) == ("registry-a", first.__name__)
