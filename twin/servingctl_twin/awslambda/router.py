"""Lambda's execution of the real handlers: functions/<name>/app.py:lambda_handler run like Lambda
runs them, each invocation in an execution environment of its function (a worker process,
servingctl_twin.awslambda.runtime, warm ones reused), or in the twin's process for tests that
monkeypatch handler code; the Powertools parameter caches kept per container, as each Lambda
container is a process of its own."""

from __future__ import annotations

import contextlib
import json
import pickle
import threading
import uuid
from collections.abc import Callable, Iterator, MutableMapping
from contextvars import ContextVar
from pathlib import Path
from types import ModuleType
from typing import Any

from aws_lambda_powertools.utilities.parameters import appconfig as parameters_appconfig
from aws_lambda_powertools.utilities.parameters import base as parameters_base
from aws_lambda_powertools.utilities.parameters import constants as parameters_constants
from aws_lambda_powertools.utilities.parameters import secrets as parameters_secrets
from aws_lambda_powertools.utilities.parameters import ssm as parameters_ssm

from servingctl_twin import iam
from servingctl_twin.awslambda import runtime as lambda_runtime
from servingctl_twin.patching import ACCOUNT_ID

# Every Lambda function of the control-plane contract: name -> in a VPC (documentation only here).
FUNCTIONS = ("profile_steps", "smoke_test", "sweep", "api", "bench_worker", "waker")


def function_name(name: str) -> str:
    """The deployed Lambda name of a contract function (profile_steps -> servingctl-profile-steps)."""
    return "servingctl-" + name.replace("_", "-")


# The twin container whose handler runs in this thread (None: the twin itself, a test, the CLI).
_CONTAINER: ContextVar[str | None] = ContextVar("servingctl_twin_container", default=None)


class _ProvidersPerContainer(MutableMapping[str, Any]):
    """Powertools' DEFAULT_PROVIDERS (the parameter providers with their caches), one set per
    in-process container (see HandlerRouter.in_process), as each Lambda container is a process of its
    own: a read of the registry in SSM is made under the reading function's role and cached for that
    container alone. (Clearing the one shared cache at each invocation raced with reads in flight.)"""

    def __init__(self) -> None:
        self._sets: dict[str | None, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def _mine(self) -> dict[str, Any]:
        with self._lock:
            return self._sets.setdefault(_CONTAINER.get(), {})

    def __getitem__(self, key: str) -> Any:
        return self._mine()[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._mine()[key] = value

    def __delitem__(self, key: str) -> None:
        del self._mine()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._mine()))

    def __len__(self) -> int:
        return len(self._mine())


def _isolate_parameter_caches() -> None:
    """Give every Powertools parameters module the per-container providers (once per process)."""
    if isinstance(parameters_constants.DEFAULT_PROVIDERS, _ProvidersPerContainer):
        return
    shared, isolated = parameters_constants.DEFAULT_PROVIDERS, _ProvidersPerContainer()
    for module in (parameters_constants, parameters_base, parameters_ssm, parameters_secrets, parameters_appconfig):
        # A Powertools upgrade that moved the dict fails here, not as a silently shared cache.
        assert getattr(module, "DEFAULT_PROVIDERS", None) is shared, f"{module.__name__}.DEFAULT_PROVIDERS moved"
        module.DEFAULT_PROVIDERS = isolated  # type: ignore[attr-defined]


class _HandlerGlobals:
    """Writes to a function's handler module in every execution environment, now and later
    (tests move the sweep's CLOCK with `router.module("sweep").CLOCK = ...`); values must pickle."""

    def __init__(self, router: HandlerRouter, name: str) -> None:
        object.__setattr__(self, "_router", router)
        object.__setattr__(self, "_name", name)

    def __setattr__(self, attribute: str, value: Any) -> None:
        router: HandlerRouter = object.__getattribute__(self, "_router")
        with router._lock:
            router._overrides.setdefault(object.__getattribute__(self, "_name"), {})[(None, attribute)] = value


class HandlerRouter:
    """Runs functions/<name>/app.py:lambda_handler like Lambda: each invocation in an execution
    environment of the function (a worker process, servingctl_twin.awslambda.runtime), warm ones reused.

    Inside in_process(), invocations run in the twin's own process instead, each loaded handler module
    (a "container") serving one at a time: for tests that replace code a handler calls (monkeypatch),
    which a worker process would not see.
    """

    def __init__(
        self,
        functions_dir: Path,
        region: str,
        config_of: Callable[[str], lambda_runtime.FunctionConfig],
        *,
        log_dir: Path | None = None,
        faults: Callable[[], frozenset[str]] = frozenset,
    ) -> None:
        _isolate_parameter_caches()
        self.functions_dir = functions_dir
        self.region = region
        self.config_of = config_of
        self.log_dir = log_dir
        self.faults = faults
        # The twin's Enforcer when IAM is on: workers decide with its policies and record into it.
        self.enforcer: iam.Enforcer | None = None
        self.invocations: list[tuple[str, str | None]] = []  # (function, errorType or None)
        self._idle: dict[tuple[str, str], list[ModuleType]] = {}  # (function, configuration) -> containers
        self._idle_workers: dict[str, list[lambda_runtime.Worker]] = {}
        self._workers: set[lambda_runtime.Worker] = set()
        self._overrides: dict[str, dict[tuple[str | None, str], Any]] = {}
        self._in_process = 0
        self._loaded = 0
        self._closed = False
        self._lock = threading.Lock()
        self._tag = uuid.uuid4().hex[:8]

    # ---- in-process containers ------------------------------------------------------------------
    @contextlib.contextmanager
    def in_process(self) -> Iterator[None]:
        """Invocations made meanwhile run in this process (tests that monkeypatch handler code)."""
        with self._lock:
            self._in_process += 1
        try:
            yield
        finally:
            with self._lock:
                self._in_process -= 1

    def _container(self, name: str, config: lambda_runtime.FunctionConfig) -> ModuleType:
        """An idle in-process container of the function's configuration, or a freshly loaded one,
        imported with the function's variables set (a configuration change gets new ones, as on Lambda)."""
        with self._lock:
            if self._idle.get((name, config.key())):
                return self._idle[(name, config.key())].pop()
            self._loaded += 1
            serial = self._loaded
        with lambda_runtime.function_environment(config.environment):
            return lambda_runtime.load_handler(self.functions_dir, name, f"_servingctl_twin_{self._tag}_{name}_{serial}")

    def _release(self, name: str, config: lambda_runtime.FunctionConfig, container: ModuleType) -> None:
        with self._lock:
            self._idle.setdefault((name, config.key()), []).append(container)

    def _call_in_process(
        self, name: str, config: lambda_runtime.FunctionConfig, context: lambda_runtime.LambdaContext, payload: bytes
    ) -> tuple[bytes, str | None]:
        container = None
        try:
            event = json.loads(payload or b"{}")
            container = self._container(name, config)
            with self._lock:
                lambda_runtime.set_attributes(container, self._overrides.get(name, {}))
            token = _CONTAINER.set(container.__name__)
            try:
                with iam.calling(name):
                    result = container.lambda_handler(event, context)
            finally:
                _CONTAINER.reset(token)
            return json.dumps(result).encode(), None
        except Exception as exc:  # the handler's failure is the invocation's answer, like Lambda
            return lambda_runtime.handler_error(exc, context.aws_request_id)
        finally:
            if container is not None:
                self._release(name, config, container)

    # ---- execution environments -------------------------------------------------------------------
    def module(self, name: str) -> _HandlerGlobals:
        """The function's handler globals: attributes set on it apply in every environment."""
        return _HandlerGlobals(self, name)

    def workers(self, name: str) -> list[lambda_runtime.Worker]:
        """The function's live execution environments, busy or idle."""
        with self._lock:
            return [w for w in self._workers if w.spec.name == name and not w.dead]

    def _acquire(self, name: str, deployed_name: str, config: lambda_runtime.FunctionConfig) -> lambda_runtime.Worker:
        """A warm environment of this configuration, or a new one (a cold start)."""
        key = config.key()
        stale: list[lambda_runtime.Worker] = []
        with self._lock:
            if self._closed:
                raise RuntimeError("the twin's Lambda service is stopped")
            idle = self._idle_workers.setdefault(name, [])
            stale = [w for w in idle if w.config_key != key or not w.process.is_alive()]
            idle[:] = [w for w in idle if w not in stale]
            worker = idle.pop() if idle else None
        for old in stale:  # a configuration change retires the old environments, as on Lambda
            self._forget(old)
        if worker is not None:
            return worker
        enforcer = self.enforcer
        setup = (
            None
            if enforcer is None
            else lambda_runtime.IamSetup(
                enforcer.policies, enforcer.names.account, enforcer.names.region, enforcer.names.partition_keys
            )
        )
        log_path = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log_path = self.log_dir / f"{name}.log"
        spec = lambda_runtime.WorkerSpec(
            self.functions_dir, name, deployed_name, self.region, ACCOUNT_ID, config, setup, log_path
        )
        worker = lambda_runtime.Worker(spec)
        with self._lock:
            self._workers.add(worker)
        return worker

    def _forget(self, worker: lambda_runtime.Worker) -> None:
        worker.kill()
        with self._lock:
            self._workers.discard(worker)

    def _answer(self, question: str, args: tuple[Any, ...]) -> Any:
        """A worker's question about the twin's state for an IAM decision."""
        enforcer = self.enforcer
        assert enforcer is not None, f"a worker asked {question} with IAM off"
        if question == "object_exists":
            return enforcer.object_exists(*args)
        return getattr(enforcer.names, question)(*args)

    def _record(self, call: iam.Call) -> None:
        enforcer = self.enforcer
        if enforcer is not None:
            enforcer.record(call)

    def __call__(self, deployed_name: str, payload: bytes) -> tuple[bytes, str | None]:
        """Invoke the handler behind deployed_name; a failure becomes Lambda's error payload."""
        name = next((f for f in FUNCTIONS if function_name(f) == deployed_name), deployed_name)
        config = self.config_of(deployed_name)
        request_id = str(uuid.uuid4())
        if self._in_process:
            context = lambda_runtime.LambdaContext(
                function_name=deployed_name,
                aws_request_id=request_id,
                memory_limit_in_mb=config.memory_mb,
                invoked_function_arn=f"arn:aws:lambda:{self.region}:{ACCOUNT_ID}:function:{deployed_name}",
                timeout_s=config.timeout_s,
            )
            body, error_type = self._call_in_process(name, config, context, payload)
        else:
            worker = self._acquire(name, deployed_name, config)
            with self._lock:
                overrides = pickle.dumps(self._overrides.get(name, {}))
            hang = name == "smoke_test" and "smoke-test-hangs" in self.faults()
            try:
                body, error_type = worker.invoke(
                    payload, request_id, overrides, hang=hang, answer=self._answer, record=self._record
                )
            finally:
                if worker.dead:
                    self._forget(worker)
                else:
                    with self._lock:
                        self._idle_workers.setdefault(name, []).append(worker)
        self.invocations.append((name, error_type))
        return body, ("Unhandled" if error_type else None)

    def close(self) -> None:
        """End every execution environment (an invocation in flight answers Runtime.ExitError)."""
        with self._lock:
            self._closed = True
            workers = list(self._workers)
            self._idle_workers.clear()
        for worker in workers:
            self._forget(worker)
