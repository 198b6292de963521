"""Lambda's execution environments on the twin: each invocation runs in a worker process of its function.

As Lambda runs them, a function's environments are processes of their own (started by a forkserver,
never forks of the threaded twin), each serving one invocation at a time and kept warm for the next;
each has the environment variables, memory size and timeout of the function's configuration as
deployed. A handler still running at the timeout is killed and the invocation answers
Sandbox.Timedout; an environment that dies mid-invocation answers Runtime.ExitError; either way the
environment is gone and the next invocation starts a new one (a cold start).

Time: each Lambda environment has a CPU share of its own (in proportion to its memory), so a burst of
cold starts on AWS does not queue for a host's cores. A worker's Init limit and timeout are measured
on its own clock (Worker.clock): the time since it began less the time its process waited on a run
queue for a CPU (Linux schedstat), so 50 workers sharing 2 busy cores are not charged the host's
contention, while a worker that works, sleeps, or waits on the twin's AWS is charged as on AWS.

IAM stays with the code that calls: a worker's AWS calls are decided in the worker
(servingctl_twin.iam) against its function's role, and what a decision needs of the twin's state
(an Auto Scaling group's ARN and tags, whether an S3 key exists) is asked over the worker's pipe, as
every recorded call is sent back, so the twin's Enforcer lists them all.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import util as importlib_util
from multiprocessing.connection import Connection
from pathlib import Path
from types import ModuleType
from typing import Any

from servingctl.loadgen.selfcheck import run_queue_wait_s
from servingctl_twin import iam

# The modules every worker needs, imported once by the forkserver so a cold start forks them in.
# servingctl.api.service is most of the api and waker handlers' import time: a burst of requests to a
# sleeping profile cold-starts one waker per request at once, which on AWS init side by side.
PRELOAD = (
    "boto3",
    "botocore.session",
    "httpx",
    "pydantic",
    "aws_lambda_powertools",
    "servingctl.api.service",
    "servingctl_twin.awslambda.runtime",
)
# What a worker keeps of the twin's own environment (the interpreter's; Lambda's runtime sets the rest).
INHERITED_ENV = ("PATH", "PYTHONPATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "VIRTUAL_ENV")
# Lambda's Init phase limit (on-demand functions). An Init past it does not fail the invocation: Lambda
# runs the Init again inside the invocation, counted against the function's timeout (Worker._invoke).
INIT_LIMIT_S = 10.0
# Where the kernel does not account run-queue waits (schedstat "0 0 0", seen on CI machines) the
# worker's clock is the wall clock, which charges the host's contention to the function: a burst of
# cold starts on 2 shared cores then takes tens of seconds of wall time for under 1 s of CPU each.
# There the twin keeps the allowance it had before it had a clock of its own, not Lambda's 10 s.
INIT_LIMIT_WALL_CLOCK_S = 60.0
# The longest a wait polls the pipe before it reads the worker's own clock again (its deadline is
# never missed by more than this).
CLOCK_POLL_S = 0.05
_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(list(PRELOAD))


@dataclass(frozen=True)
class FunctionConfig:
    """What an execution environment takes from the function's configuration."""

    timeout_s: float
    memory_mb: int
    environment: Mapping[str, str]

    def key(self) -> str:
        """Equal for equal configurations: a changed configuration gets new environments, as on Lambda."""
        return json.dumps([self.timeout_s, self.memory_mb, sorted(self.environment.items())])


@dataclass(frozen=True)
class IamSetup:
    """What a worker needs to decide its calls: every function's policy and the twin's names."""

    policies: Mapping[str, iam.Policy]
    account: str
    region: str
    partition_keys: Mapping[str, str]


@dataclass
class LambdaContext:
    """The attributes of AWS Lambda's context object that handlers and Powertools read."""

    function_name: str
    invoked_function_arn: str
    memory_limit_in_mb: int
    timeout_s: float
    function_version: str = "$LATEST"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    _started: float = field(default_factory=time.monotonic)

    @property
    def log_group_name(self) -> str:
        """/aws/lambda/<function name>."""
        return f"/aws/lambda/{self.function_name}"

    @property
    def log_stream_name(self) -> str:
        """A log stream name shaped like Lambda's."""
        return f"{time.strftime('%Y/%m/%d')}/[$LATEST]{self.aws_request_id.replace('-', '')}"

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds left before the function's timeout."""
        return max(0, int((self.timeout_s - (time.monotonic() - self._started)) * 1000))


def error_payload(error_type: str, message: str, request_id: str, stack: list[str] | None = None) -> bytes:
    """Lambda's answer for a failed invocation (with X-Amz-Function-Error: Unhandled)."""
    return json.dumps(
        {"errorMessage": message, "errorType": error_type, "requestId": request_id, "stackTrace": stack or []}
    ).encode()


def handler_error(exc: BaseException, request_id: str) -> tuple[bytes, str]:
    """The payload and errorType of a handler that raised (a missing handler module: Lambda's import error)."""
    error_type = "Runtime.ImportModuleError" if isinstance(exc, ModuleNotFoundError) else type(exc).__name__
    return error_payload(error_type, str(exc), request_id, traceback.format_tb(exc.__traceback__)), error_type


def load_handler(functions_dir: Path, name: str, module_name: str) -> ModuleType:
    """functions/<name>/app.py as a module (Lambda's Init phase)."""
    path = functions_dir / name / "app.py"
    if not path.is_file():
        raise ModuleNotFoundError(f"Unable to import module 'app': no {path}")
    spec = importlib_util.spec_from_file_location(module_name, path)
    assert spec and spec.loader
    module = importlib_util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# One in-process Init at a time: each sets its function's variables on the one process environment.
_init_lock = threading.Lock()


@contextlib.contextmanager
def function_environment(environment: Mapping[str, str]) -> Iterator[None]:
    """The function's variables set on this process's environment while its module is imported (its
    Init phase reads its settings: servingctl.shared.environment), then put back as they were: how an
    in-process container (HandlerRouter.in_process) gets what Lambda sets before it imports a handler.
    A worker process has exactly its function's environment instead (serve)."""
    with _init_lock:
        saved = {key: os.environ.get(key) for key in environment}
        os.environ.update(environment)
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def set_attributes(handler: ModuleType, overrides: Mapping[tuple[str | None, str], Any]) -> None:
    """Apply (module or None for the handler's, attribute) -> value, as tests move a clock or patch a step."""
    for (module, attribute), value in overrides.items():
        setattr(handler if module is None else sys.modules[module], attribute, value)


# ---- the worker (runs in the execution environment's process) -------------------------------------
@dataclass(frozen=True)
class WorkerSpec:
    """Everything an execution environment starts from."""

    functions_dir: Path
    name: str  # the contract name (functions/<name>/)
    deployed_name: str
    region: str
    account: str
    config: FunctionConfig
    iam: IamSetup | None
    log_path: Path | None


class _Asker:
    """The worker's side of the pipe during an invocation: questions to the twin, calls recorded."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def ask(self, question: str, *args: Any) -> Any:
        """Ask the twin (asg_arn, asg_tags, object_exists) and wait for its answer."""
        self.conn.send(("ask", question, args))
        return self.conn.recv()

    def record(self, call: iam.Call) -> None:
        """Send a decided call to the twin's Enforcer."""
        self.conn.send(("call", call))


class _WorkerEnforcer(iam.Enforcer):
    """The function's Enforcer inside its worker: decides here, records in the twin."""

    def __init__(self, setup: IamSetup, asker: _Asker) -> None:
        names = iam.Names(
            account=setup.account,
            region=setup.region,
            partition_keys=setup.partition_keys,
            asg_arn=lambda group: asker.ask("asg_arn", group),
            asg_tags=lambda group: asker.ask("asg_tags", group),
        )
        super().__init__(setup.policies, names, lambda bucket, key: bool(asker.ask("object_exists", bucket, key)))
        self.asker = asker

    def decide(
        self, function: str, service: str, operation: str, params: Mapping[str, Any], access_key: str | None = None
    ) -> iam.Call:
        """Decide as the twin's Enforcer would and send the call to it."""
        call = super().decide(function, service, operation, params, access_key)
        self.asker.record(call)
        return call


def _environment(spec: WorkerSpec) -> dict[str, str]:
    """The function's variables and the ones Lambda's runtime sets."""
    kept = {k: os.environ[k] for k in INHERITED_ENV if k in os.environ}
    return (
        kept
        | dict(spec.config.environment)
        | {
            "AWS_LAMBDA_FUNCTION_NAME": spec.deployed_name,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.config.memory_mb),
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{spec.deployed_name}",
            "_HANDLER": "app.lambda_handler",
        }
    )


def serve(conn: Connection, spec: WorkerSpec) -> None:
    """An execution environment: Init (load the handler), then one invocation per message until EOF."""
    if spec.log_path is not None:  # the function's log stream (CloudWatch's part), not the twin's terminal
        log = os.open(spec.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
    os.environ.clear()
    os.environ.update(_environment(spec))
    asker = _Asker(conn)
    if spec.iam is not None:
        iam.activate(_WorkerEnforcer(spec.iam, asker))
    handler: ModuleType | None = None
    init_error: BaseException | None = None
    try:
        handler = load_handler(spec.functions_dir, spec.name, f"_servingctl_lambda_{spec.name}")
    except Exception as exc:  # Lambda answers every invocation of a broken Init with its error
        init_error = exc
    conn.send(("ready",))
    while True:
        try:
            _, payload, request_id, overrides, hang = conn.recv()
        except EOFError:
            return
        context = LambdaContext(
            function_name=spec.deployed_name,
            aws_request_id=request_id,
            memory_limit_in_mb=spec.config.memory_mb,
            invoked_function_arn=f"arn:aws:lambda:{spec.region}:{spec.account}:function:{spec.deployed_name}",
            timeout_s=spec.config.timeout_s,
        )
        if hang:  # the fault: the handler never returns (Lambda's timeout ends it)
            threading.Event().wait()
        try:
            if init_error is not None:
                raise init_error
            assert handler is not None
            set_attributes(handler, pickle.loads(overrides))
            with iam.calling(spec.name):
                result = handler.lambda_handler(json.loads(payload or b"{}"), context)
            conn.send(("done", json.dumps(result).encode(), None))
        except Exception as exc:  # the handler's failure is the invocation's answer, like Lambda
            conn.send(("done", *handler_error(exc, request_id)))


# ---- the twin's side -----------------------------------------------------------------------------
Answerer = Callable[[str, tuple[Any, ...]], Any]


class Worker:
    """One execution environment as the twin sees it: its process and its end of the pipe."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.config_key = spec.config.key()
        self.conn, child = _context.Pipe()
        self.process = _context.Process(target=serve, args=(child, spec), name=f"lambda-{spec.name}", daemon=True)
        self.process.start()  # returns once the forkserver forked it: the worker's clock starts
        self.born = time.monotonic()
        child.close()
        self.ready = False
        self.busy = False  # an invocation is in flight
        self.dead = False

    @property
    def pid(self) -> int | None:
        """The process id (tests kill it to play a crash)."""
        return self.process.pid

    def clock(self) -> float:
        """Seconds the environment has had to itself since it began: the wall time less its process's
        wait on a run queue for a CPU (the wall time where the kernel does not account that wait)."""
        wall = time.monotonic() - self.born
        waited = run_queue_wait_s(f"/proc/{self.pid}/schedstat")
        return wall - waited if waited is not None else wall

    def invoke(
        self,
        payload: bytes,
        request_id: str,
        overrides: bytes,
        *,
        hang: bool,
        answer: Answerer,
        record: Callable[[iam.Call], None],
    ) -> tuple[bytes, str | None]:
        """Run one invocation: (payload, errorType or None); past the timeout the process is killed."""
        self.busy = True
        try:
            return self._invoke(payload, request_id, overrides, hang=hang, answer=answer, record=record)
        finally:
            self.busy = False

    def _invoke(
        self,
        payload: bytes,
        request_id: str,
        overrides: bytes,
        *,
        hang: bool,
        answer: Answerer,
        record: Callable[[iam.Call], None],
    ) -> tuple[bytes, str | None]:
        timeout_s = self.spec.config.timeout_s
        deadline = None
        if not self.ready:
            limit = INIT_LIMIT_S if run_queue_wait_s() is not None else INIT_LIMIT_WALL_CLOCK_S
            started = self._wait("ready", limit, answer, record)
            if started == "timeout":
                # Lambda runs an Init past its limit again inside the invocation, which then has the
                # function's timeout for that Init and the handler: the twin lets this Init go on (the
                # same Init again would take as long), its timeout counted from the Init's start.
                # AWS answers up to INIT_LIMIT_S later; it fails the same invocations.
                deadline = timeout_s
                started = self._wait("ready", deadline, answer, record)
            if started is not None:
                return self._failed(started, request_id, timeout_s)
            self.ready = True
        self.conn.send(("invoke", payload, request_id, overrides, hang))
        message = self._wait("done", deadline if deadline is not None else self.clock() + timeout_s, answer, record)
        if isinstance(message, str):
            return self._failed(message, request_id, timeout_s)
        assert message is not None
        return message[1], message[2]

    def _wait(self, kind: str, deadline: float, answer: Answerer, record: Callable[[iam.Call], None]) -> Any:
        """The message of `kind` before the worker's clock reaches deadline, answering questions
        meanwhile; "timeout" or "exit" when it never comes."""
        while True:
            left = deadline - self.clock()
            if left <= 0:
                return "timeout"
            # The worker's clock runs no faster than the wall: waiting `left` never passes the deadline.
            if not self.conn.poll(max(left, CLOCK_POLL_S)):
                continue
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                return "exit"
            if message[0] == "ask":
                self.conn.send(answer(message[1], message[2]))
            elif message[0] == "call":
                record(message[1])
            elif message[0] == kind:
                return None if kind == "ready" else message

    def _failed(self, how: str, request_id: str, limit_s: float) -> tuple[bytes, str]:
        """Lambda's answer for an environment that timed out or died; the environment is gone."""
        self.kill()
        if how == "timeout":
            message = f"RequestId: {request_id} Error: Task timed out after {limit_s:.2f} seconds"
            return error_payload("Sandbox.Timedout", message, request_id), "Sandbox.Timedout"
        code = self.process.exitcode
        status = f"signal: {_signal_name(-code)}" if code is not None and code < 0 else f"exit status {code}"
        message = f"RequestId: {request_id} Error: Runtime exited with error: {status}"
        return error_payload("Runtime.ExitError", message, request_id), "Runtime.ExitError"

    def kill(self) -> None:
        """End the environment at once (SIGKILL) and reap it."""
        self.dead = True
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        self.conn.close()


def _signal_name(number: int) -> str:
    """killed, terminated, ... as Go's os/exec prints them (Lambda's runtime messages do)."""
    names: dict[int, str] = {
        signal.SIGKILL: "killed",
        signal.SIGTERM: "terminated",
        signal.SIGSEGV: "segmentation fault",
        signal.SIGABRT: "aborted",
    }
    return names.get(number, f"signal {number}")
