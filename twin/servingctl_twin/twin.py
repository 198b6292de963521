"""The local twin of AWS: moto in server mode running the real state machines and Lambda handlers.

Owns the moto server harness (in-process, 127.0.0.1), the bootstrap of every AWS resource the
registry names (ECS, Auto Scaling, ELBv2, SSM, DynamoDB, S3, Lambda, Step Functions), the Lambda
functions configured as template.yaml deploys them (their invokes run the real handlers through
servingctl_twin.awslambda.router),
the benchmark task definition whose tasks servingctl_twin.ecs.tasks runs, and helpers to run executions.
The world simulator (servingctl_twin.world) plays AWS's part over time; servingctl_twin.eventbridge.rules
plays the sweep's schedule and the status-change rule of template.yaml (with sweep=True) and aborts
a .sync child with its parent. Each AWS service the twin plays has its folder (autoscaling, awslambda,
apigateway, cloudwatch, dynamodb, ecs, elbv2, eventbridge, iam, s3, stepfunctions), which owns its state
and its moto patches (servingctl_twin.patching). Twins of one process play different regions (moto's
backends are the process's, one per region): each claims its registry's region, and nothing of one is
seen by another but what AWS shares between regions too (IAM roles).
"""

from __future__ import annotations

import io
import json
import logging
import math
import os
import random
import re
import shutil
import tempfile
import time
import uuid
import warnings
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import boto3
import httpx
from botocore.config import Config
from botocore.credentials import Credentials

from servingctl.registry import layout
from servingctl.registry.loader import parse_registry
from servingctl.registry.models import Registry
from servingctl.store.dynamodb import TABLE_SCHEMA
from servingctl_cli.sigv4 import SigV4
from servingctl_twin import iam, patching
from servingctl_twin.apigateway.apigw import LOCAL_PRINCIPAL, ApiGateway, Principal
from servingctl_twin.apigateway.validators import Validators, load_validators
from servingctl_twin.autoscaling.patches import asg_tags
from servingctl_twin.awslambda import runtime as lambda_runtime
from servingctl_twin.awslambda.patches import Invoker, function_configuration
from servingctl_twin.awslambda.router import FUNCTIONS, HandlerRouter, function_name
from servingctl_twin.cloudwatch.logs import model_log_group
from servingctl_twin.ecs import tasks as ecs_tasks
from servingctl_twin.ecs.patches import Placement
from servingctl_twin.ecs.scheduler import PREFETCH_CONTAINER, STREAMER_ARGS
from servingctl_twin.elbv2.load_balancers import LoadBalancers
from servingctl_twin.elbv2.patches import TargetHealth
from servingctl_twin.eventbridge.rules import EventBridge, load_template, read_wiring
from servingctl_twin.faults import WORLD_AGENT, check_fault
from servingctl_twin.iam.task_iam import TaskIam
from servingctl_twin.patching import ACCOUNT_ID
from servingctl_twin.s3.patches import object_exists
from servingctl_twin.world import Delays, World

REPO_ROOT = Path(__file__).resolve().parents[2]
# Lambda invokes the twin's load balancers make at once (a burst of requests to a Lambda target).
ALB_LAMBDA_CONCURRENCY = 100
# How long the ALB's Invoke waits: Lambda's longest timeout and Init limit, on the worker's clock, which
# runs slower than the wall on a busy host (servingctl_twin.awslambda.runtime): a liveness bound.
ALB_LAMBDA_READ_TIMEOUT_S = 4 * (900 + lambda_runtime.INIT_LIMIT_S)
REFERENCE_REGISTRY = Path(__file__).with_name("reference_registry.json")
# Variables of every twin function that Lambda's runtime (credentials, region) or the twin's pacing
# (SERVINGCTL_STOP_POLL, SERVINGCTL_START_POLL) provides; each function also gets the ones template.yaml gives it.
RUNTIME_VARIABLES = (
    "SERVINGCTL_STOP_POLL",
    "SERVINGCTL_START_POLL",
    "POWERTOOLS_TRACE_DISABLED",
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
)
# The registry's SSM path: one parameter per pool and profile under it (servingctl.registry.layout),
# as Terraform publishes it under /<name>/registry.
SSM_PATH = "/servingctl/registry"
# Terraform's alb module: the load balancer's idle timeout and the listener's default 404 body.
IDLE_TIMEOUT_S = 300
UNKNOWN_PROFILE_BODY = '{"error":"unknown or missing X-LLM-Profile header"}'
# template.yaml's benchmark task (BenchTaskDefinition) and the image whose command it runs.
BENCH_TASK = "BenchTaskDefinition"
BENCH_DOCKERFILE = Path("infra/bench/Dockerfile")
BENCH_IMAGE = "servingctl-bench:twin"  # BenchImageUri on the twin: the task runs the image's command locally
TABLE = "servingctl"
BUCKET = "servingctl-bench-records"
# Terraform's model_weights_bucket (per region on the twin) and model_weights_prefix default.
WEIGHTS_BUCKET = "servingctl-model-weights"
WEIGHTS_PREFIX = "hf-hub"
STACK = "servingctl"  # samconfig.toml's stack_name: the SAM stack the twin's CloudFormation lists
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
API_RESOURCE = "ServingApi"  # template.yaml's REST API: its resource policy is the twin's API Gateway's


def machine_name(stem: str) -> str:
    """The deployed state machine name of statemachine/<stem>.asl.json."""
    return "servingctl-" + stem.replace("_", "-")


def substitution_key(kind: str, stem: str) -> str:
    """DefinitionSubstitutions key of a function or state machine (profile_steps -> ProfileStepsFunctionArn)."""
    return "".join(part.capitalize() for part in stem.split("_")) + kind + "Arn"


@dataclass(frozen=True)
class ExecutionResult:
    """A finished (or timed-out) execution: describe_execution plus its full history."""

    arn: str
    status: str
    describe: dict[str, Any]
    history: list[dict[str, Any]]

    @property
    def output(self) -> Any:
        """The parsed output (None unless SUCCEEDED)."""
        raw = self.describe.get("output")
        return json.loads(raw) if raw else None

    @property
    def error(self) -> str | None:
        """The error name of a failed execution."""
        return self.describe.get("error")

    @property
    def cause(self) -> str | None:
        """The cause of a failed execution."""
        return self.describe.get("cause")

    def states_entered(self) -> list[str]:
        """Names of the states entered, in order."""
        return [e["stateEnteredEventDetails"]["name"] for e in self.history if "stateEnteredEventDetails" in e]


@dataclass(frozen=True)
class _Network:
    """The twin's VPC as the bootstrap made it: what pools, balancers and services are placed in."""

    vpc: str
    subnets: list[str]
    sg: str
    image: str


class Twin:
    """The local twin: start() bootstraps AWS in moto and starts the world; stop() leaves nothing running."""

    def __init__(
        self,
        registry_file: str | Path | None = None,
        *,
        model_server: str = "sim",
        faults: Sequence[str] = (),
        time_scale: float = 20.0,
        port: int = 0,
        host: str = "127.0.0.1",
        delays: Delays | None = None,
        workdir: str | Path | None = None,
        repo_root: str | Path | None = None,
        api_port: int | None = None,
        sweep: bool = False,
        execution_timeouts_s: Mapping[str, int] | None = None,
        iam_template: Mapping[str, Any] | None = None,
        lambda_logs_to_terminal: bool = False,
        wake_on_request: Sequence[str] = (),
    ) -> None:
        if model_server not in ("sim", "vllm"):
            raise ValueError(f"model_server: {model_server!r} is not one of 'sim', 'vllm'")
        for fault in faults:
            check_fault(fault)  # ValueError naming the allowed values (NAME=ARG forms included)
        if time_scale <= 0:
            raise ValueError("time_scale: must be greater than 0")
        self.source_registry = Path(registry_file) if registry_file else REFERENCE_REGISTRY
        # Profiles that wake on request on this twin (as Terraform's profiles.*.wake_on_request sets them).
        self.wake_on_request = tuple(wake_on_request)
        self.model_server = model_server
        self.faults = tuple(faults)
        self.time_scale = time_scale
        self.host = host
        self.port = port
        self.delays = delays or Delays()
        self.repo_root = Path(repo_root) if repo_root else REPO_ROOT
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="servingctl-twin-"))
        self.table_name = TABLE
        self.bucket_name = ""  # named at start(), by region
        self.weights_bucket = ""  # Terraform's model_weights_bucket, named at start() by region
        self.private_subnets: list[str] = []  # Terraform's private_subnet_ids, made at start()
        self.region = ""
        self.registry: Registry | None = None
        self.state_machines: dict[str, str] = {}  # file stem -> ARN
        self.functions: dict[str, str] = {}  # contract name -> ARN
        # The ALBs' data plane (servingctl_twin.elbv2.load_balancers): every profile's endpoint_url is its
        # load balancer's address.
        self.load_balancers: LoadBalancers | None = None
        self.router: HandlerRouter | None = None
        self.wakers: dict[str, str] = {}
        self._alb_lambda: Any = None
        self.world: World | None = None
        self._server: patching.MotoServer | None = None
        # This twin's region of moto's backends, claimed at start (servingctl_twin.patching).
        self.site: patching.Site | None = None
        # The REST API over HTTP (servingctl_twin.apigateway.apigw) when api_port is given (0 picks a free port).
        self.api_port = api_port
        self.api: ApiGateway | None = None
        # The control loop of the deployed stack: the scheduled sweep and the status-change events.
        self.sweep = sweep
        self.eventbridge: EventBridge | None = None
        # State machine stem -> TimeoutSeconds put in its definition (an execution then times out).
        self.execution_timeouts_s = dict(execution_timeouts_s or {})
        # The process's environment variables this twin set, as they were before (restored at stop).
        self._saved_environment: dict[str, str | None] = {}
        # template.yaml after the SAM transform: when given, each function's role decides its calls
        # (servingctl_twin.iam) and self.iam records every call.
        self.iam_template = iam_template
        self.iam: iam.Enforcer | None = None
        # The handlers' output: <workdir>/logs/lambda/<function>.log, or this process's terminal.
        self.lambda_logs_to_terminal = lambda_logs_to_terminal
        # SERVINGCTL_BENCH_ECS_* of the benchmark task the twin registered (empty without template.yaml),
        # and what runs its tasks.
        self.bench_ecs: dict[str, str] = {}
        self.tasks: ecs_tasks.TaskRunner | None = None

    # ---- lifecycle --------------------------------------------------------------------------
    def start(self) -> Twin:
        """Start moto, bootstrap every resource and start the world simulator."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        patching.apply()
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        document = json.loads(self.source_registry.read_text())
        for name in self.wake_on_request:
            if name not in document["profiles"]:
                raise ValueError(f"wake_on_request: unknown profile {name!r}; known profiles: {sorted(document['profiles'])}")
            document["profiles"][name]["wake_on_request"] = True
        self.region = document["region"]
        self.site = patching.claim(self.region)
        self.bucket_name = f"{BUCKET}-{self.region}"  # S3's names are global: one bucket per region's twin
        self.weights_bucket = f"{WEIGHTS_BUCKET}-{self.region}"
        self._server = patching.MotoServer(self.host, self.port)
        self._server.start()
        self.port = self._server.get_host_and_port()[1]
        # The Step Functions interpreter calls Lambda at http://localhost:$MOTO_PORT (any live twin's
        # server reaches every region's backends).
        self._saved_environment["MOTO_PORT"] = os.environ.get("MOTO_PORT")
        os.environ["MOTO_PORT"] = str(self.port)
        self.site.port = self.port
        if patching.claimed_regions() == [self.region]:
            self._moto_api("reset", {})
        else:
            patching.reset_region(ACCOUNT_ID, self.region)  # the other twins' regions stay as they are
        self._moto_api("config", {"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}})
        # ECS tasks move only when the world moves them (moto would advance one state per describe).
        self._moto_api(
            "state-manager/set-transition", {"model_name": "ecs::task", "transition": {"progression": "manual", "times": 10**9}}
        )
        self._bootstrap(document)
        assert self.load_balancers is not None and self.registry is not None  # both made by _bootstrap
        self.world = World(
            patching.backends(ACCOUNT_ID, self.region),
            self.registry,
            site=self.site,
            endpoint_url=self.endpoint_url,
            load_balancers=self.load_balancers,
            model_server=self.model_server,
            faults=self.faults,
            time_scale=self.time_scale,
            delays=self.delays,
            logdir=self.workdir / "logs",
        )
        if self.iam_template is not None:
            self.iam = self._enforcer(self.iam_template)
            iam.activate(self.iam, self.region)
            assert self.router is not None
            self.router.enforcer = self.iam
        if self.bench_ecs:
            family = self.bench_ecs["SERVINGCTL_BENCH_ECS_TASK_DEFINITION"]
            roles = (
                {}
                if self.iam is None
                else {
                    family: TaskIam(
                        family,
                        self.iam.policies[family].statements,
                        ACCOUNT_ID,
                        self.region,
                        self.iam.names.partition_keys,
                        calls_path="",
                        assumable={arn: p.statements for arn, p in self.iam.policies.items() if arn.startswith("arn:aws:iam::")},
                        trusts={arn: p.trust for arn, p in self.iam.policies.items() if arn.startswith("arn:aws:iam::")},
                    )
                }
            )
            self.tasks = ecs_tasks.TaskRunner(
                {family: ecs_tasks.image_command(self.repo_root / BENCH_DOCKERFILE)},
                {key: self.environment()[key] for key in RUNTIME_VARIABLES if key.startswith("AWS_")}
                | {"PYTHONPATH": str(self.repo_root / "layers" / "core"), "PYTHONUNBUFFERED": "1"},
                self.workdir / "logs" / "ecs",
                faults=lambda: self.world.faults if self.world is not None else frozenset(),
                roles=roles,
                record=None if self.iam is None else self.iam.record,
            )
            self._claimed().part(Placement).runner = self.tasks
        self.world.start()
        self._start_eventbridge()
        if self.api_port is not None:
            self._start_api()
        self.publish_stack()

    def _start_eventbridge(self) -> None:
        """The template's schedule and rule (a repo without template.yaml, as some tests build, gets
        neither: it cannot run the sweep)."""
        template = self.repo_root / "template.yaml"
        if not template.is_file():
            if self.sweep:
                raise FileNotFoundError(f"sweep: {template} is missing; the twin reads the sweep's schedule and rule from it")
            return
        router = self.router
        assert router is not None
        self.eventbridge = EventBridge(
            # Status-change events come from Step Functions itself: they do not lag (executions-lag).
            self.client("stepfunctions", internal=True),
            read_wiring(template, self.state_machines),
            lambda payload: router(function_name("sweep"), payload),
            region=self.region,
            account=ACCOUNT_ID,
            time_scale=self.time_scale,
            deliver=self.sweep,
        )
        self.eventbridge.start()

    def stop(self) -> None:
        """Stop running executions, the world (and every model server) and moto; remove the workdir."""
        try:
            if self.api is not None:
                self.api.stop()
                self.api = None
            if self.eventbridge is not None:
                self.eventbridge.stop()
                self.eventbridge = None
            if self._server is not None and self.state_machines:
                self._stop_executions()
            if self.site is not None:
                self.site.part(Placement).runner = None
            if self.tasks is not None:
                self.tasks.stop()
            if self.world is not None:
                self.world.stop()
            if self.load_balancers is not None:
                self.load_balancers.stop()
                self.load_balancers = None
            if self.iam is not None:
                iam.activate(None, self.region)
            if self.site is not None:
                self.site.part(Invoker).router = None
            if self.router is not None:
                self.router.close()
            if self._server is not None:
                self._server.stop()
                self._server = None
            for key, value in self._saved_environment.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            self._saved_environment = {}
            if self._own_workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)
        finally:
            if self.site is not None:
                patching.release(self.site)
                self.site = None
                # The interpreter of a twin still running must keep reaching a live server.
                ports = patching.claimed_ports()
                if ports and os.environ.get("MOTO_PORT") not in {str(p) for p in ports}:
                    os.environ["MOTO_PORT"] = str(ports[0])

    def __enter__(self) -> Twin:
        """Start the twin."""
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        """Stop the twin whatever happened."""
        self.stop()

    def _stop_executions(self) -> None:
        sfn = self.client("stepfunctions", internal=True)
        for arn in self.state_machines.values():
            for execution in sfn.list_executions(stateMachineArn=arn, statusFilter="RUNNING")["executions"]:
                sfn.stop_execution(executionArn=execution["executionArn"], cause="the local twin stopped")

    def _start_api(self) -> None:
        """Serve the REST API on host:api_port through the real api handler."""
        from servingctl.api.routes import openapi_document

        router = self.router
        assert router is not None
        self.api = ApiGateway(
            lambda payload: router(function_name("api"), payload),
            openapi_document,
            self.host,
            self.api_port or 0,
            region=self.region,
            resource_policy=self.api_resource_policy(),
            validators=self.api_validators(),
        )
        self.api.start()
        self.api_port = int(self.api.url.rsplit(":", 1)[1])

    def api_resource_policy(self) -> list[iam.Statement]:
        """template.yaml's API resource policy (ServingApi's CustomStatements) with the twin's names and
        the parameters' defaults; none without template.yaml (then only this account's callers pass)."""
        path = self.repo_root / "template.yaml"
        if not path.is_file():
            return []
        template = load_template(path)
        refs = self.template_refs(template)
        statements = template["Resources"][API_RESOURCE]["Properties"]["Auth"]["ResourcePolicy"]["CustomStatements"]
        resolved = iam.resolve(statements, refs, iam.evaluate_conditions(template, refs))
        return resolved if isinstance(resolved, list) else [resolved]

    def api_validators(self) -> Validators:
        """template.yaml's request validators and gateway responses of the API; none without template.yaml."""
        path = self.repo_root / "template.yaml"
        return load_validators(load_template(path), API_RESOURCE) if path.is_file() else Validators()

    def api_auth(self, principal: Principal | None = None) -> SigV4:
        """An httpx auth signing requests to the twin's API as principal (default the twin's user)."""
        principal = principal or LOCAL_PRINCIPAL
        return SigV4(Credentials(principal.access_key_id, principal.secret_access_key), self.region)

    # ---- access -----------------------------------------------------------------------------
    def _claimed(self) -> patching.Site:
        """This twin's site (start() claimed it)."""
        assert self.site is not None, "start() the twin first"
        return self.site

    @property
    def api_url(self) -> str | None:
        """Base URL of the REST API, None when the twin serves none."""
        return self.api.url if self.api is not None else None

    @property
    def endpoint_url(self) -> str:
        """URL of the emulated AWS endpoint."""
        return f"http://{self.host}:{self.port}"

    def _invoke_lambda(self, function_arn: str, event: bytes) -> tuple[bytes, str | None]:
        """The ALB's synchronous Invoke of a Lambda target (through the twin's Lambda, as AWS does)."""
        if self._alb_lambda is None:
            # ALB invokes each request at once, never retried, waiting as long as the function may run
            # (its init included): no SDK retry, no pool smaller than a burst, no read timeout below that.
            self._alb_lambda = boto3.client(  # type: ignore[call-overload]
                "lambda",
                endpoint_url=self.endpoint_url,
                region_name=self.region,
                config=Config(
                    retries={"total_max_attempts": 1},
                    max_pool_connections=ALB_LAMBDA_CONCURRENCY,
                    read_timeout=ALB_LAMBDA_READ_TIMEOUT_S,
                    user_agent_extra=WORLD_AGENT,
                ),
                **CREDENTIALS,
            )
        answer = self._alb_lambda.invoke(FunctionName=function_arn, Payload=event)
        return answer["Payload"].read(), answer.get("FunctionError")

    def client(self, service: str, *, internal: bool = False) -> Any:
        """A boto3 client of service against the twin; internal: the twin's own (its harness, its AWS-side
        agents), which no fault touches (e.g. its reads of executions do not lag under executions-lag)."""
        # types-boto3 overloads client() per literal service name; this one takes any name.
        return boto3.client(  # type: ignore[call-overload]
            service,
            endpoint_url=self.endpoint_url,
            region_name=self.region,
            config=Config(retries={"mode": "standard", "max_attempts": 5}, user_agent_extra=WORLD_AGENT if internal else None),
            **CREDENTIALS,
        )

    @property
    def grace_s(self) -> int:
        """The services' health-check grace period as the twin sets it: Delays.health_grace_s in the
        twin's real seconds (whole, as ECS takes it)."""
        return max(1, math.ceil(self.delays.health_grace_s / self.time_scale))

    def scaled_poll(self) -> dict[str, float]:
        """The flows' default pacing (15 s, x1.5, max 60 s) divided by the time scale, in whole seconds."""
        return {
            "interval_s": max(1, round(15 / self.time_scale)),
            "max_interval_s": max(1, round(60 / self.time_scale)),
            "backoff": 1.5,
        }

    def environment(self) -> dict[str, str]:
        """Environment of every Lambda function (and of a shell that wants to talk to the twin)."""
        return {
            # The stops the sweep starts are paced like the twin's clock (the deployed sweep leaves it unset).
            "SERVINGCTL_STOP_POLL": json.dumps(self.scaled_poll()),
            # The starts the waker makes, likewise (deployed: unset, start_profile's defaults).
            "SERVINGCTL_START_POLL": json.dumps(self.scaled_poll()),
            # As deployed: every function reads the registry from SSM by its path.
            "SERVINGCTL_REGISTRY": f"ssm:{SSM_PATH}",
            # template.yaml's 60 s registry cache on the twin's clock.
            "POWERTOOLS_PARAMETERS_MAX_AGE": str(max(1, round(60 / self.time_scale))),
            "SERVINGCTL_TABLE": self.table_name,
            "SERVINGCTL_BUCKET": self.bucket_name,
            "POWERTOOLS_SERVICE_NAME": "servingctl",
            "POWERTOOLS_METRICS_NAMESPACE": "servingctl",
            "POWERTOOLS_TRACE_DISABLED": "true",
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": CREDENTIALS["aws_access_key_id"],
            "AWS_SECRET_ACCESS_KEY": CREDENTIALS["aws_secret_access_key"],
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
            # template.yaml's BenchRunRole.Arn on the twin (template_refs), assumed per benchmark run.
            "SERVINGCTL_BENCH_RUN_ROLE": f"arn:aws:iam::{ACCOUNT_ID}:role/servingctl-BenchRunRole",
            **self.bench_ecs,
            **{
                # START_STATE_MACHINE_ARN, STOP_STATE_MACHINE_ARN, RUN_BENCHMARK_STATE_MACHINE_ARN (template.yaml's names)
                stem.removesuffix("_profile").upper() + "_STATE_MACHINE_ARN": arn
                for stem, arn in self.state_machines.items()
            },
        }

    def set_faults(self, *faults: str) -> None:
        """Replace the active faults of the world (see servingctl_twin.faults.FAULTS)."""
        assert self.world is not None, "start() the twin first"
        self.world.set_faults(faults)

    # ---- executions -------------------------------------------------------------------------
    def start_execution(self, machine: str, execution_input: Mapping[str, Any], name: str | None = None) -> str:
        """Start statemachine/<machine>.asl.json with the input; return the execution ARN."""
        arn = self.state_machines[machine]
        answer = self.client("stepfunctions", internal=True).start_execution(
            stateMachineArn=arn,
            name=name or f"{machine.replace('_', '-')}-{uuid.uuid4().hex[:12]}",
            input=json.dumps(execution_input),
        )
        return str(answer["executionArn"])

    def wait_execution(self, execution_arn: str, timeout_s: float = 120.0) -> ExecutionResult:
        """Poll until the execution leaves RUNNING (or timeout_s passes); return it with its history (read
        as it is, whatever lag a fault gives the public reads)."""
        sfn = self.client("stepfunctions", internal=True)
        deadline = time.monotonic() + timeout_s
        while True:
            describe = sfn.describe_execution(executionArn=execution_arn)
            if describe["status"] != "RUNNING" or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        history: list[dict[str, Any]] = []
        for page in sfn.get_paginator("get_execution_history").paginate(executionArn=execution_arn):
            history.extend(page["events"])
        return ExecutionResult(execution_arn, describe["status"], describe, history)

    def run(
        self, machine: str, execution_input: Mapping[str, Any], name: str | None = None, timeout_s: float = 120.0
    ) -> ExecutionResult:
        """start_execution + wait_execution."""
        return self.wait_execution(self.start_execution(machine, execution_input, name), timeout_s)

    # ---- bootstrap --------------------------------------------------------------------------
    def _moto_api(self, path: str, body: Mapping[str, Any]) -> None:
        httpx.post(f"{self.endpoint_url}/moto-api/{path}", json=body, timeout=30).raise_for_status()

    def _bootstrap(self, document: dict[str, Any]) -> None:
        """Make what Terraform and the template deploy, from the registry document (its ids and ARNs
        replaced by the twin's), then the control plane."""
        net = self._network()
        for name, pool in document["pools"].items():
            # As Terraform's root module sizes the group: one instance per replica of its largest profile;
            # a pool with a profile of several replicas has managed termination protection (its validation).
            replicas = max([p.get("max_replicas", 1) for p in document["profiles"].values() if p["pool"] == name] or [1])
            self._pool(name, pool, net, replicas)
        self._clusters(document)
        balancers = self._load_balancers(document, net)
        for priority, (name, profile) in enumerate(sorted(document["profiles"].items()), start=1):
            tg = self._profile_target(priority, profile, net, balancers)
            self._profile_service(name, profile, document, net, tg)
        self.registry = parse_registry(document)
        self._register_bench_task(self.client("ecs"), net.subnets, net.sg)
        self.publish_registry(document)
        self._storage()
        self._bootstrap_control_plane()

    def _network(self) -> _Network:
        """The VPC, its two subnets, the tasks' security group and an image for the launch templates."""
        ec2 = self.client("ec2")
        # The VPC is a loopback range: a task's ENI address is one this machine answers on, where its
        # model server listens, so the load balancer and in-VPC functions reach a target at its Id:Port
        # as on AWS. A random second octet keeps twins running side by side apart.
        octet = random.randint(1, 254)
        vpc = ec2.create_vpc(CidrBlock=f"127.{octet}.0.0/16")["Vpc"]["VpcId"]
        ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})  # awsvpc ENIs get DNS names
        subnets = [
            ec2.create_subnet(VpcId=vpc, CidrBlock=f"127.{octet}.{i}.0/24", AvailabilityZone=f"{self.region}{az}")["Subnet"][
                "SubnetId"
            ]
            for i, az in enumerate("ab")
        ]
        self._bootstrap_network(ec2, vpc, subnets, octet)
        sg = ec2.create_security_group(GroupName="servingctl-tasks", Description="model server tasks", VpcId=vpc)["GroupId"]
        # A filter keeps the answer small: moto knows thousands of images per region.
        image = ec2.describe_images(Filters=[{"Name": "name", "Values": ["amzn2-ami-hvm-*"]}])["Images"][0]["ImageId"]
        return _Network(vpc, subnets, sg, image)

    def _pool(self, name: str, pool: dict[str, Any], net: _Network, replicas: int) -> None:
        """A pool's launch templates, Auto Scaling group (and warm pool) and ECS capacity provider."""
        ec2, ecs, asg = (self.client(s) for s in ("ec2", "ecs", "autoscaling"))
        # One launch template per instance type of the pool (primary, then alternates), as Terraform makes them.
        for option in [pool, *pool.get("alternates", [])]:
            option["launch_template_id"] = ec2.create_launch_template(
                LaunchTemplateName=f"servingctl-{name}-{option['instance_type']}",
                LaunchTemplateData={"ImageId": net.image, "InstanceType": option["instance_type"], "SecurityGroupIds": [net.sg]},
            )["LaunchTemplate"]["LaunchTemplateId"]
        asg.create_auto_scaling_group(
            AutoScalingGroupName=pool["asg_name"],
            LaunchTemplate={"LaunchTemplateId": pool["launch_template_id"], "Version": "$Latest"},
            MinSize=0,
            MaxSize=replicas,
            DesiredCapacity=0,
            NewInstancesProtectedFromScaleIn=replicas > 1,
            VPCZoneIdentifier=",".join(net.subnets),
            # servingctl:pool as Terraform tags every pool (the controller's IAM conditions key on it).
            Tags=[
                {"Key": "AmazonECSManaged", "Value": "true", "PropagateAtLaunch": True},
                {"Key": "servingctl:pool", "Value": name, "PropagateAtLaunch": True},
            ],
        )
        if pool.get("warm_pool"):
            warm = pool["warm_pool"]
            bound = (
                {"MaxGroupPreparedCapacity": warm["max_group_prepared_capacity"]}
                if warm.get("max_group_prepared_capacity")
                else {}
            )
            asg.put_warm_pool(
                AutoScalingGroupName=pool["asg_name"],
                PoolState=warm.get("pool_state", "Stopped"),
                MinSize=warm.get("min_size", 0),
                InstanceReusePolicy={"ReuseOnScaleIn": bool(warm.get("reuse_on_scale_in"))},
                **bound,
            )
            if warm.get("prepare"):
                # As Terraform's compute-pool module makes it: the user data's prepare step completes it.
                asg.put_lifecycle_hook(
                    AutoScalingGroupName=pool["asg_name"],
                    LifecycleHookName=f"{pool['asg_name']}-prepare",
                    LifecycleTransition="autoscaling:EC2_INSTANCE_LAUNCHING",
                    DefaultResult="ABANDON",
                    HeartbeatTimeout=warm.get("prepare_timeout_s", 3600),
                )
        group = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[pool["asg_name"]])["AutoScalingGroups"][0]
        pool["asg_arn"] = group["AutoScalingGroupARN"]
        ecs.create_capacity_provider(
            name=pool["capacity_provider"],
            autoScalingGroupProvider={
                "autoScalingGroupArn": pool["asg_arn"],
                "managedScaling": {
                    "status": "ENABLED",
                    "targetCapacity": 100,
                    "minimumScalingStepSize": 1,
                    "maximumScalingStepSize": 1,
                    "instanceWarmupPeriod": 300,
                },
                "managedTerminationProtection": "ENABLED" if replicas > 1 else "DISABLED",
                "managedDraining": "ENABLED",
            },
        )

    def _clusters(self, document: Mapping[str, Any]) -> None:
        """The profiles' clusters with their pools' capacity providers."""
        ecs = self.client("ecs")
        clusters = sorted({p["cluster"] for p in document["profiles"].values()})
        for cluster in clusters:
            ecs.create_cluster(clusterName=cluster)
            providers = sorted(
                {
                    document["pools"][p["pool"]]["capacity_provider"]
                    for p in document["profiles"].values()
                    if p["cluster"] == cluster
                }
            )
            ecs.put_cluster_capacity_providers(cluster=cluster, capacityProviders=providers, defaultCapacityProviderStrategy=[])

    def _load_balancers(self, document: Mapping[str, Any], net: _Network) -> dict[str, dict[str, str]]:
        """The internal ALBs with their listener (old ARN -> new ARN and listener), and the twin's ALBs started."""
        elbv2 = self.client("elbv2")
        balancers: dict[str, dict[str, str]] = {}
        for old_arn in sorted({p["load_balancer_arn"] for p in document["profiles"].values()}):
            lb = elbv2.create_load_balancer(
                Name=_arn_name(old_arn, "loadbalancer/app/"),
                Subnets=net.subnets,
                SecurityGroups=[net.sg],
                Scheme="internal",
                Type="application",
            )["LoadBalancers"][0]
            # As Terraform's alb module makes it: idle timeout 300 s, a JSON 404 for an unknown header.
            elbv2.modify_load_balancer_attributes(
                LoadBalancerArn=lb["LoadBalancerArn"],
                Attributes=[{"Key": "idle_timeout.timeout_seconds", "Value": str(IDLE_TIMEOUT_S)}],
            )
            listener = elbv2.create_listener(
                LoadBalancerArn=lb["LoadBalancerArn"],
                Protocol="HTTP",
                Port=80,
                DefaultActions=[
                    {
                        "Type": "fixed-response",
                        "FixedResponseConfig": {
                            "StatusCode": "404",
                            "ContentType": "application/json",
                            "MessageBody": UNKNOWN_PROFILE_BODY,
                        },
                    }
                ],
            )["Listeners"][0]
            balancers[old_arn] = {"arn": lb["LoadBalancerArn"], "listener": listener["ListenerArn"]}
        self.load_balancers = LoadBalancers(
            patching.backends(ACCOUNT_ID, self.region).elbv2,
            self.client("cloudwatch"),
            host=self.host,
            time_scale=self.time_scale,
            target_health=self._claimed().part(TargetHealth),
            invoke=self._invoke_lambda,
            invoke_concurrency=ALB_LAMBDA_CONCURRENCY,
        ).start()
        # The waker: one Lambda target group per load balancer (Terraform's alb module makes it), the
        # waker function registered once the control plane exists (_bootstrap_control_plane).
        self.wakers = {
            old: elbv2.create_target_group(Name=f"servingctl-waker-{n}", TargetType="lambda")["TargetGroups"][0]["TargetGroupArn"]
            for n, old in enumerate(sorted(balancers), start=1)
        }
        return balancers

    def _profile_target(
        self, priority: int, profile: dict[str, Any], net: _Network, balancers: Mapping[str, Mapping[str, str]]
    ) -> str:
        """The profile's target group and its listener rule on the profile's header; its ARN."""
        elbv2 = self.client("elbv2")
        # As Terraform's serving-profile module makes it (health check and deregistration delay).
        tg = elbv2.create_target_group(
            Name=_arn_name(profile["target_group_arn"], "targetgroup/"),
            Protocol="HTTP",
            Port=8000,
            VpcId=net.vpc,
            TargetType="ip",
            HealthCheckPath="/health",
            HealthCheckIntervalSeconds=15,
            HealthCheckTimeoutSeconds=10,
            HealthyThresholdCount=2,
            UnhealthyThresholdCount=4,
            Matcher={"HttpCode": "200"},
        )["TargetGroups"][0]
        elbv2.modify_target_group_attributes(
            TargetGroupArn=tg["TargetGroupArn"], Attributes=[{"Key": "deregistration_delay.timeout_seconds", "Value": "30"}]
        )
        balancer = balancers[profile["load_balancer_arn"]]
        header = profile["routing_header"]
        waker = self.wakers[profile["load_balancer_arn"]]
        # A wake-on-request profile starts STOPPED: its rule forwards to the waker (as Terraform makes it).
        forward = waker if profile.get("wake_on_request") else tg["TargetGroupArn"]
        rule = elbv2.create_rule(
            ListenerArn=balancer["listener"],
            Priority=priority,
            Conditions=[
                {"Field": "http-header", "HttpHeaderConfig": {"HttpHeaderName": header["name"], "Values": [header["value"]]}}
            ],
            Actions=[{"Type": "forward", "TargetGroupArn": forward}],
        )["Rules"][0]
        profile["wake"] = (profile.get("wake") or {}) | {"listener_rule_arn": rule["RuleArn"], "waker_target_group_arn": waker}
        profile["target_group_arn"] = tg["TargetGroupArn"]
        profile["load_balancer_arn"] = balancer["arn"]
        assert self.load_balancers is not None, "the twin's ALBs start before the profiles' targets"
        profile["endpoint_url"] = self.load_balancers.url(balancer["arn"])
        return str(tg["TargetGroupArn"])

    def _profile_service(self, name: str, profile: dict[str, Any], document: Mapping[str, Any], net: _Network, tg: str) -> None:
        """The profile's log group, task definition and ECS service (desired 0) behind its target group."""
        ecs, logs = self.client("ecs"), self.client("logs")
        # The containers log as Terraform's serving-profile module sets them up (awslogs to
        # /ecs/<service>, stream prefix the profile's name); the world writes their lines there.
        group = model_log_group(profile["service"])
        logs.create_log_group(logGroupName=group)
        awslogs = {
            "logDriver": "awslogs",
            "options": {"awslogs-group": group, "awslogs-region": self.region, "awslogs-stream-prefix": name},
        }
        model: dict[str, Any] = {
            "name": "vllm",
            "image": profile["serving"]["image"],
            "essential": True,
            "cpu": 1024,
            "memory": 1920,
            "portMappings": [{"containerPort": 8000, "protocol": "tcp"}],
            "healthCheck": {"command": ["CMD-SHELL", "curl -fs localhost:8000/health || exit 1"]},
            "logConfiguration": awslogs,
        }
        containers = [model]
        if profile["serving"].get("load_format") == "runai_streamer":
            # No prefetch: vLLM streams the pinned snapshot from S3 (Terraform's streamed_model).
            snapshot = streamed_snapshot(self.weights_bucket, WEIGHTS_PREFIX, profile["serving"])
            model["command"] = ["--model", snapshot, "--served-model-name", profile["model"], *STREAMER_ARGS]
        else:
            model["dependsOn"] = [{"containerName": PREFETCH_CONTAINER, "condition": "SUCCESS"}]
            containers.append(
                {
                    "name": PREFETCH_CONTAINER,
                    "image": "public.ecr.aws/aws-cli/aws-cli",
                    "entryPoint": ["sh", "-c"],
                    "command": [prefetch_command(self.weights_bucket, WEIGHTS_PREFIX, profile["serving"]["model_id"])],
                    "essential": False,
                    "cpu": 0,
                    "memory": 128,
                    "logConfiguration": awslogs,
                }
            )
        ecs.register_task_definition(
            family=profile["service"],
            networkMode="awsvpc",
            requiresCompatibilities=["EC2"],
            # moto's container instances offer 4096 CPU units and 7482 MiB: the real sizes live in Terraform.
            cpu="1024",
            memory="2048",
            containerDefinitions=containers,
        )
        ecs.create_service(
            cluster=profile["cluster"],
            serviceName=profile["service"],
            taskDefinition=profile["service"],
            desiredCount=0,
            capacityProviderStrategy=[{"capacityProvider": document["pools"][profile["pool"]]["capacity_provider"], "weight": 1}],
            networkConfiguration={"awsvpcConfiguration": {"subnets": net.subnets, "securityGroups": [net.sg]}},
            loadBalancers=[{"targetGroupArn": tg, "containerName": "vllm", "containerPort": 8000}],
            healthCheckGracePeriodSeconds=int(self.delays.health_grace_s),
            # As Terraform's serving-profile module tags them: the reconciler finds running capacity by these.
            tags=[{"key": "servingctl:profile", "value": name}, {"key": "servingctl:pool", "value": profile["pool"]}],
        )
        if profile.get("max_replicas", 1) > 1:
            self._replica_scaling(name, profile)
        # moto's CreateService drops the grace period; UpdateService (patched) keeps it for the world.
        # In the twin's seconds (AWS's / time scale), the clock the controller measures starts with.
        ecs.update_service(cluster=profile["cluster"], service=profile["service"], healthCheckGracePeriodSeconds=self.grace_s)

    def _replica_scaling(self, name: str, profile: Mapping[str, Any]) -> None:
        """As Terraform's serving-profile module makes them: the scalable target at rest (0..0) and
        target tracking on the sweep's per-replica load, a full batch per replica."""
        scaling = self.client("application-autoscaling")
        target = {
            "ServiceNamespace": "ecs",
            "ResourceId": f"service/{profile['cluster']}/{profile['service']}",
            "ScalableDimension": "ecs:service:DesiredCount",
        }
        scaling.register_scalable_target(**target, MinCapacity=0, MaxCapacity=0)
        scaling.put_scaling_policy(
            **target,
            PolicyName=f"{profile['service']}-requests-per-replica",
            PolicyType="TargetTrackingScaling",
            TargetTrackingScalingPolicyConfiguration={
                "TargetValue": float(profile["serving"].get("max_num_seqs", 4)),
                "CustomizedMetricSpecification": {
                    "Namespace": "servingctl",
                    "MetricName": "RequestsPerReplica",
                    "Dimensions": [{"Name": "Profile", "Value": name}],
                    "Statistic": "Average",
                },
                "ScaleOutCooldown": 60,
                "ScaleInCooldown": 300,
            },
        )

    def _storage(self) -> None:
        """The state table and the records bucket."""
        dynamodb = self.client("dynamodb")
        dynamodb.create_table(TableName=self.table_name, **TABLE_SCHEMA)
        dynamodb.update_time_to_live(TableName=self.table_name, TimeToLiveSpecification={"Enabled": True, "AttributeName": "ttl"})
        # S3 refuses a bucket outside us-east-1 without its LocationConstraint.
        location = {} if self.region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": self.region}}
        self.client("s3").create_bucket(Bucket=self.bucket_name, **location)
        self.client("s3").create_bucket(Bucket=self.weights_bucket, **location)

    def _bootstrap_network(self, ec2: Any, vpc: str, subnets: list[str], octet: int) -> None:
        """Terraform's network module: a NAT-only public subnet with the NAT gateway the private
        subnets route 0.0.0.0/0 to, and the S3 gateway endpoint on their route table."""
        gateway = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
        ec2.attach_internet_gateway(InternetGatewayId=gateway, VpcId=vpc)
        public = ec2.create_subnet(VpcId=vpc, CidrBlock=f"127.{octet}.240.0/28", AvailabilityZone=f"{self.region}a")
        allocation = ec2.allocate_address(Domain="vpc")["AllocationId"]
        nat = ec2.create_nat_gateway(SubnetId=public["Subnet"]["SubnetId"], AllocationId=allocation)["NatGateway"]["NatGatewayId"]
        table = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
        ec2.create_route(RouteTableId=table, DestinationCidrBlock="0.0.0.0/0", NatGatewayId=nat)
        for subnet in subnets:
            ec2.associate_route_table(RouteTableId=table, SubnetId=subnet)
        ec2.create_vpc_endpoint(
            VpcId=vpc, VpcEndpointType="Gateway", ServiceName=f"com.amazonaws.{self.region}.s3", RouteTableIds=[table]
        )
        self.private_subnets = list(subnets)

    def publish_stack(self) -> None:
        """The SAM stack as CloudFormation lists it (samconfig.toml's name): the parameters
        infra/terraform/sam-parameters.json fills and the outputs `servingctl doctor` reads (ApiUrl
        only when the twin serves its API). Its resources are the twin's own, made above."""
        assert self.registry is not None
        refs = {
            "RegistryPath": SSM_PATH,
            "PrivateSubnetIds": ",".join(self.private_subnets),
            "ClusterArn": sorted({p.cluster for p in self.registry.profiles.values()})[0],
        }
        outputs = {"StateTableName": self.table_name, "RecordsBucketName": self.bucket_name}
        if self.api_url is not None:
            outputs["ApiUrl"] = self.api_url  # the twin serves its one stage at the root
        template = {
            "Parameters": {name: {"Type": "String"} for name in refs},
            # moto needs one resource; a wait condition handle creates nothing.
            "Resources": {"Twin": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
            "Outputs": {name: {"Value": value} for name, value in outputs.items()},
        }
        cloudformation = self.client("cloudformation")
        with warnings.catch_warnings():  # moto warns that it creates nothing for the handle: nothing is wanted
            warnings.simplefilter("ignore", UserWarning)
            cloudformation.create_stack(
                StackName=STACK,
                TemplateBody=json.dumps(template),
                Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in refs.items()],
            )

    def publish_registry(self, document: Mapping[str, Any]) -> dict[str, str]:
        """Publish a registry document to SSM as Terraform's registry.tf does (one String parameter per
        pool and profile and the index, Standard tier up to 4 KB, else Advanced) and delete the
        parameters under the path it no longer has; returns name -> value."""
        ssm = self.client("ssm")
        present = [
            p["Name"]
            for page in ssm.get_paginator("get_parameters_by_path").paginate(Path=SSM_PATH, Recursive=True)
            for p in page["Parameters"]
        ]
        wanted = publish_parameters(ssm, document, SSM_PATH)
        stale = [name for name in present if name not in wanted]
        for start in range(0, len(stale), 10):  # DeleteParameters takes at most 10 names
            ssm.delete_parameters(Names=stale[start : start + 10])
        return wanted

    def _register_bench_task(self, ecs: Any, subnets: list[str], security_group: str) -> None:
        """Register template.yaml's BenchTaskDefinition as deployed (its environment rendered with the
        twin's names) and note where run_benchmark's long scenarios run (SERVINGCTL_BENCH_ECS_*)."""
        template_path = self.repo_root / "template.yaml"
        if not template_path.is_file():
            return
        template = load_template(template_path)
        refs = self.template_refs(template) | {"BenchImageUri": BENCH_IMAGE}
        conditions = iam.evaluate_conditions(template, refs) | {"HasBenchImage": True}
        properties = {
            key: iam.resolve(value, refs, conditions)
            for key, value in template["Resources"][BENCH_TASK]["Properties"].items()
            if key in ("Family", "NetworkMode", "RequiresCompatibilities", "Cpu", "Memory")
        }
        definitions = [
            {key: c[key] for key in ("Name", "Image", "Essential", "Environment") if key in c}
            for c in template["Resources"][BENCH_TASK]["Properties"]["ContainerDefinitions"]
        ]
        containers = [
            # moto places a task by its containers' sizes: the one container gets the task's.
            {
                "name": c["Name"],
                "image": c["Image"],
                "essential": c.get("Essential", True),
                "cpu": int(properties["Cpu"]),
                "memory": int(properties["Memory"]),
                "environment": [{"name": v["Name"], "value": v["Value"]} for v in c.get("Environment", [])],
            }
            for c in iam.resolve(definitions, refs, conditions)
        ]
        registered = ecs.register_task_definition(
            family=properties["Family"],
            networkMode=properties["NetworkMode"],
            requiresCompatibilities=properties["RequiresCompatibilities"],
            cpu=properties["Cpu"],
            memory=properties["Memory"],
            containerDefinitions=containers,
        )["taskDefinition"]
        self.bench_ecs = {
            "SERVINGCTL_BENCH_ECS_TASK_DEFINITION": registered["family"],
            "SERVINGCTL_BENCH_ECS_CLUSTER": refs["ClusterArn"],
            "SERVINGCTL_BENCH_ECS_SUBNETS": ",".join(subnets),
            "SERVINGCTL_BENCH_ECS_SECURITY_GROUPS": security_group,
        }

    def _bootstrap_control_plane(self) -> None:
        iam, lam, sfn = self.client("iam"), self.client("lambda"), self.client("stepfunctions")
        trust = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Action": "sts:AssumeRole",
                    "Principal": {"Service": ["lambda.amazonaws.com", "states.amazonaws.com"]},
                }
            ],
        }
        try:
            role = iam.create_role(RoleName="servingctl-twin", AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
        except iam.exceptions.EntityAlreadyExistsException:  # IAM is account-wide: a twin of another region made it
            role = iam.get_role(RoleName="servingctl-twin")["Role"]["Arn"]
        stems = sorted(p.name.removesuffix(".asl.json") for p in (self.repo_root / "statemachine").glob("*.asl.json"))
        self.state_machines = {
            stem: f"arn:aws:states:{self.region}:{ACCOUNT_ID}:stateMachine:{machine_name(stem)}" for stem in stems
        }
        environment = self.environment()
        archive = io.BytesIO()
        with zipfile.ZipFile(archive, "w") as zf:
            zf.writestr("app.py", "def lambda_handler(event, context):\n    raise RuntimeError('routed by the twin')\n")
        deployed = function_settings(self.repo_root)
        for name in FUNCTIONS:
            timeout_s, memory_mb, variables = deployed[name]
            given = {key: environment[key] for key in (*variables, *RUNTIME_VARIABLES) if key in environment}
            self.functions[name] = lam.create_function(
                FunctionName=function_name(name),
                Runtime="python3.12",
                Role=role,
                Handler="app.lambda_handler",
                Code={"ZipFile": archive.getvalue()},
                Timeout=timeout_s,
                MemorySize=memory_mb,
                Environment={"Variables": given},
            )["FunctionArn"]
        # The twin's shell and in-process handlers (HandlerRouter.in_process) see every variable.
        self._saved_environment |= {key: os.environ.get(key) for key in environment}
        os.environ.update(environment)
        region = self.region

        def config_of(deployed_name: str) -> lambda_runtime.FunctionConfig:
            return lambda_runtime.FunctionConfig(*function_configuration(ACCOUNT_ID, region, deployed_name))

        self.router = HandlerRouter(
            self.repo_root / "functions",
            self.region,
            config_of,
            log_dir=None if self.lambda_logs_to_terminal else self.workdir / "logs" / "lambda",
            faults=lambda: self.world.faults if self.world is not None else frozenset(),
        )
        self._claimed().part(Invoker).router = self.router
        elbv2 = self.client("elbv2")
        for waker in self.wakers.values():
            # As Terraform does: ELB may invoke the waker for this group only, then the group targets it.
            lam.add_permission(
                FunctionName=self.functions["waker"],
                StatementId=f"alb-{waker.rsplit('/', 1)[-1]}",
                Action="lambda:InvokeFunction",
                Principal="elasticloadbalancing.amazonaws.com",
                SourceArn=waker,
            )
            elbv2.register_targets(TargetGroupArn=waker, Targets=[{"Id": self.functions["waker"]}])
        substitutions = {substitution_key("Function", n): arn for n, arn in self.functions.items()}
        substitutions |= {substitution_key("StateMachine", s): arn for s, arn in self.state_machines.items()}
        for stem in stems:
            definition = substitute((self.repo_root / "statemachine" / f"{stem}.asl.json").read_text(), substitutions)
            if stem in self.execution_timeouts_s:
                definition = json.dumps(json.loads(definition) | {"TimeoutSeconds": self.execution_timeouts_s[stem]})
            sfn.create_state_machine(name=machine_name(stem), definition=definition, roleArn=role, type="STANDARD")

    # ---- IAM ----------------------------------------------------------------------------------
    def _enforcer(self, template: Mapping[str, Any]) -> iam.Enforcer:
        """The functions' roles from the translated template, rendered with the twin's names."""
        assert self.registry is not None
        registry = self.registry
        b = patching.backends(ACCOUNT_ID, self.region)
        refs = self.template_refs(template)
        policies = (
            iam.function_policies(template, refs)
            | iam.task_policies(template, refs | {"BenchImageUri": BENCH_IMAGE})
            | iam.assumable_policies(template, refs)
        )
        names = iam.Names(
            account=ACCOUNT_ID,
            region=self.region,
            partition_keys={self.table_name: "pk"},
            asg_arn=lambda name: next(p.asg_arn for p in registry.pools.values() if p.asg_name == name),
            asg_tags=lambda name: asg_tags(b, name),
        )
        return iam.Enforcer(policies, names, lambda bucket, key: object_exists(ACCOUNT_ID, bucket, key))

    def template_refs(self, template: Mapping[str, Any]) -> dict[str, Any]:
        """What template.yaml's Ref and Fn::GetAtt name on the twin: its parameters as
        infra/terraform/sam-parameters.json would fill them, and the resources the twin made."""
        assert self.registry is not None
        registry = self.registry
        [cluster] = sorted({p.cluster for p in registry.profiles.values()})
        arn = f"arn:aws:{{}}:{self.region}:{ACCOUNT_ID}:{{}}".format
        refs: dict[str, Any] = {
            # A parameter the twin gives no value of its own takes its default, as a deploy without it does.
            **{name: p["Default"] for name, p in (template.get("Parameters") or {}).items() if "Default" in p},
            "AWS::Partition": "aws",
            "AWS::Region": self.region,
            "AWS::AccountId": ACCOUNT_ID,
            "AWS::StackName": "servingctl",
            "AWS::URLSuffix": "amazonaws.com",
            "RegistryPath": SSM_PATH,
            "RegistryPathArn": arn("ssm", "parameter" + SSM_PATH),
            "ClusterArn": arn("ecs", f"cluster/{cluster}"),
            "ServiceArns": [arn("ecs", f"service/{p.cluster}/{p.service}") for p in registry.profiles.values()],
            "ListenerRuleArns": [p.wake.listener_rule_arn for p in registry.profiles.values() if p.wake is not None],
            "AsgArns": [p.asg_arn for p in registry.pools.values()],
            "ModelLogGroupArns": [arn("logs", f"log-group:{model_log_group(p.service)}:*") for p in registry.profiles.values()],
            "LaunchTemplateArns": [
                arn("ec2", f"launch-template/{t}") for p in registry.pools.values() for _, t in p.options() if t
            ],
            "InstanceRoleArn": f"arn:aws:iam::{ACCOUNT_ID}:role/servingctl-instance",
            "PrivateSubnetIds": [],
            "LambdaSecurityGroupId": "",
            "BenchImageUri": "",
            "AlarmEmail": "",
            "StateTable": self.table_name,
            "StateTable.Arn": arn("dynamodb", f"table/{self.table_name}"),
            "RecordsBucket": self.bucket_name,
            "RecordsBucket.Arn": f"arn:aws:s3:::{self.bucket_name}",
            "SweepDeadLetterQueue.Arn": arn("sqs", "servingctl-sweep-dead-letters"),
        }
        for logical, resource in template["Resources"].items():
            if resource["Type"] == "AWS::Lambda::Function":
                name = resource["Properties"]["Code"]["S3Key"].rstrip("/").rsplit("/", 1)[-1]
                refs[logical], refs[f"{logical}.Arn"] = function_name(name), self.functions[name]
            elif resource["Type"] == "AWS::StepFunctions::StateMachine":
                stem = resource["Properties"]["DefinitionS3Location"]["Key"].rsplit("/", 1)[-1].removesuffix(".asl.json")
                refs[logical], refs[f"{logical}.Name"] = self.state_machines[stem], machine_name(stem)
            elif resource["Type"] == "AWS::IAM::Role":
                refs[f"{logical}.Arn"] = f"arn:aws:iam::{ACCOUNT_ID}:role/servingctl-{logical}"
        return refs


def publish_parameters(ssm: Any, document: Mapping[str, Any], path: str) -> dict[str, str]:
    """Put every parameter of the document under path as Terraform does (String; Standard tier up to
    4 KB, else Advanced, as Intelligent-Tiering picks); returns name -> value."""
    wanted = layout.parameters(document, path)
    for name, value in wanted.items():
        tier = "Standard" if len(value.encode()) <= layout.SSM_STANDARD_BYTES else "Advanced"
        ssm.put_parameter(Name=name, Value=value, Type="String", Tier=tier, Overwrite=True)
    return wanted


def streamed_snapshot(bucket: str, prefix: str, serving: Mapping[str, Any]) -> str:
    """The s3:// snapshot vLLM streams under load_format runai_streamer, as Terraform's module names it."""
    tree = "models--" + serving["model_id"].replace("/", "--")
    return f"s3://{bucket}/{prefix}/{tree}/snapshots/{serving.get('revision') or 'unpinned'}"


def prefetch_command(bucket: str, prefix: str, model_id: str) -> str:
    """The prefetch container's command as Terraform's serving-profile module writes it (its S3 source
    is what `servingctl doctor` and `weights upload` read; the twin's world plays its run)."""
    tree = "models--" + model_id.replace("/", "--")
    return (
        f"echo 'servingctl prefetch: syncing {prefix}/{tree}'; aws configure set default.s3.max_concurrent_requests 64 && "
        f"aws s3 sync --only-show-errors s3://{bucket}/{prefix}/{tree} /root/.cache/huggingface/hub/{tree} "
        "&& echo 'servingctl prefetch: done'"
    )


def function_settings(repo_root: Path) -> dict[str, tuple[int, int, list[str]]]:
    """Contract name -> (Timeout, MemorySize, environment variable names) as template.yaml deploys each
    function (Globals under its own properties); a repository without a template gets the project's."""
    template = repo_root / "template.yaml"
    document = load_template(template if template.is_file() else REPO_ROOT / "template.yaml")
    defaults = document.get("Globals", {}).get("Function", {})
    found: dict[str, tuple[int, int, list[str]]] = {}
    for resource in document["Resources"].values():
        if resource["Type"] != "AWS::Serverless::Function":
            continue
        properties = resource["Properties"]
        variables = [
            *defaults.get("Environment", {}).get("Variables", {}),
            *properties.get("Environment", {}).get("Variables", {}),
        ]
        found[Path(properties["CodeUri"]).name] = (
            int(properties.get("Timeout", defaults.get("Timeout", 3))),
            int(properties.get("MemorySize", defaults.get("MemorySize", 128))),
            variables,
        )
    return found


def substitute(definition: str, substitutions: Mapping[str, str]) -> str:
    """Fill ${Name} placeholders like SAM's DefinitionSubstitutions; an unknown name is an error."""

    def one(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in substitutions:
            raise KeyError(f"DefinitionSubstitutions: no value for ${{{key}}}; known: {sorted(substitutions)}")
        return substitutions[key]

    return re.sub(r"\$\{([A-Za-z0-9]+)\}", one, definition)


def _arn_name(arn: str, prefix: str) -> str:
    """The resource name inside an ELBv2 ARN (targetgroup/<name>/<id>, loadbalancer/app/<name>/<id>)."""
    return arn.split(prefix, 1)[1].split("/")[0]
