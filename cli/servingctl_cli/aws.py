"""AWS itself, for the commands that read or write it directly rather than through the REST API
(`doctor`, `weights upload`, `logs`, `endpoint`): which account, region and endpoint (the user's
usual credential chain, --aws-profile and --region; or the running local twin's emulated AWS), and
what is deployed there: the SAM stack's parameters and outputs, the registry its RegistryPath
names, and each profile's task definition (where its weights are synced from, where it logs).

boto3 loads only when a command runs, so `--help` stays fast.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from servingctl_cli.client import Unreachable, running_twin_state, twin_state_path
from servingctl_cli.settings import STACK_ENV, CliSettings

if TYPE_CHECKING:
    from servingctl.registry.models import Registry, ServingProfile

DEFAULT_STACK = "servingctl"  # samconfig.toml's stack_name
# The twin's moto accepts any key; these are the twin's, as its own clients use.
TWIN_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
# The S3 source in the prefetch container's command (Terraform's serving-profile module).
SYNC_SOURCE = re.compile(r"aws s3 sync [^|;&]*?s3://([a-z0-9.\-]+)/(\S+)")
# load_format runai_streamer: no prefetch, vLLM's --model is the snapshot in S3 (bucket, model tree).
STREAM_SOURCE = re.compile(r"^s3://([a-z0-9.\-]+)/(\S+?)/snapshots/[^/]+/?$")
PREFETCH_CONTAINER = "prefetch-weights"  # Terraform's serving-profile module names it so
MODEL_CONTAINER = "vllm"


class NotDeployed(Exception):
    """Something the command needs is not deployed or not readable (the message says what and why)."""


def add_aws_arguments(parser: argparse.ArgumentParser) -> None:
    """--aws-profile, --region, --local and --stack (every command that calls AWS directly takes them)."""
    group = parser.add_argument_group("AWS")
    group.add_argument("--aws-profile", help="AWS credentials profile (default: the usual chain)")
    group.add_argument("--region", help="AWS region (default: the profile's or $AWS_REGION)")
    group.add_argument("--local", action="store_true", help="the local twin's emulated AWS (servingctl local up)")
    group.add_argument(
        "--stack",
        default=CliSettings.from_env().stack or DEFAULT_STACK,
        help=f"the SAM stack's name (default ${STACK_ENV} or {DEFAULT_STACK})",
    )


@dataclass
class Aws:
    """A boto3 session for one account and region, against AWS or the local twin's endpoint."""

    session: Any
    region: str
    endpoint_url: str | None = None  # the twin's emulated AWS; None for AWS itself

    @property
    def local(self) -> bool:
        """True on the local twin."""
        return self.endpoint_url is not None

    def client(self, service: str, **config: Any) -> Any:
        """A boto3 client of service (botocore Config options as keyword arguments)."""
        from botocore.config import Config

        return self.session.client(
            service,
            region_name=self.region,
            endpoint_url=self.endpoint_url,
            config=Config(retries={"mode": "standard", "max_attempts": 5}, **config),
        )


def connect_aws(args: argparse.Namespace) -> Aws:
    """The AWS the user means: the twin with --local, or when none of --aws-profile, --region or
    $SERVINGCTL_API_URL says otherwise and a twin runs; else the usual credential chain."""
    import boto3

    chose_aws = args.aws_profile or args.region or CliSettings.from_env().api_url
    state = (running_twin_state() or {}) if args.local or not chose_aws else {}
    if args.local or (not chose_aws and state.get("aws_endpoint_url")):
        if not state.get("aws_endpoint_url"):
            raise Unreachable(f"--local: no twin is running (no live {twin_state_path()}); start one with `servingctl local up`")
        region = state.get("region") or "us-east-1"
        session = boto3.Session(
            aws_access_key_id=TWIN_CREDENTIALS["aws_access_key_id"],
            aws_secret_access_key=TWIN_CREDENTIALS["aws_secret_access_key"],
            region_name=region,
        )
        return Aws(session, region, state["aws_endpoint_url"])
    from botocore.exceptions import ProfileNotFound

    try:
        session = boto3.Session(profile_name=args.aws_profile, region_name=args.region)
    except ProfileNotFound as exc:
        raise Unreachable(f"--aws-profile: {exc}") from None
    if not session.region_name:
        raise Unreachable("no AWS region: pass --region, set AWS_REGION, or `aws configure set region REGION`")
    return Aws(session, session.region_name)


@dataclass(frozen=True)
class Stack:
    """The SAM stack as CloudFormation describes it."""

    name: str
    status: str
    parameters: dict[str, str]
    outputs: dict[str, str]


def describe_stack(aws: Aws, name: str) -> Stack:
    """The stack's status, parameters and outputs (NotDeployed when CloudFormation has none of that name)."""
    from botocore.exceptions import ClientError

    try:
        [found] = aws.client("cloudformation").describe_stacks(StackName=name)["Stacks"]
    except ClientError as exc:
        if "does not exist" in str(exc):
            raise NotDeployed(f"no CloudFormation stack {name!r} in {aws.region}") from None
        raise
    return Stack(
        name,
        found["StackStatus"],
        {p["ParameterKey"]: p.get("ParameterValue", "") for p in found.get("Parameters", [])},
        {o["OutputKey"]: o["OutputValue"] for o in found.get("Outputs", [])},
    )


def read_registry(aws: Aws, stack: Stack) -> Registry:
    """The registry the stack reads (its RegistryPath parameter), as the controller assembles it."""
    from servingctl.registry import layout
    from servingctl.registry.loader import parse_registry

    path = stack.parameters.get("RegistryPath")
    if not path:
        raise NotDeployed(f"stack {stack.name} has no RegistryPath parameter")
    base = path.rstrip("/")
    values = {
        parameter["Name"][len(base) + 1 :]: parameter["Value"]
        for page in aws.client("ssm").get_paginator("get_parameters_by_path").paginate(Path=base, Recursive=True)
        for parameter in page["Parameters"]
    }
    built = layout.assemble(base, values, aws.region)
    if built.problems:
        raise NotDeployed("; ".join(str(p) for p in built.problems))
    return parse_registry(built.document)


@dataclass(frozen=True)
class ProfileTask:
    """What a profile's deployed task definition says: where its weights sync from and where it logs."""

    family: str
    weights_bucket: str | None  # None: the model server downloads from the hub (weights_source = "hub")
    weights_prefix: str | None  # <model_weights_prefix>/models--<org>--<name>
    log_group: str | None
    stream_prefix: str | None


def profile_task(aws: Aws, profile: ServingProfile) -> ProfileTask:
    """The profile's service's current task definition, read for its weights source and log group."""
    ecs = aws.client("ecs")
    services = ecs.describe_services(cluster=profile.cluster, services=[profile.service])["services"]
    if not services:
        raise NotDeployed(f"ECS service {profile.service} not found in cluster {profile.cluster}")
    definition = ecs.describe_task_definition(taskDefinition=services[0]["taskDefinition"])["taskDefinition"]
    containers = {c["name"]: c for c in definition["containerDefinitions"]}
    bucket = prefix = None
    prefetch = containers.get(PREFETCH_CONTAINER)
    command = list(containers.get(MODEL_CONTAINER, {}).get("command") or [])
    streamed = command[command.index("--model") + 1] if "--model" in command[:-1] else ""
    found = SYNC_SOURCE.search(" ".join(prefetch.get("command") or [])) if prefetch is not None else STREAM_SOURCE.match(streamed)
    if found:
        bucket, prefix = found.group(1), found.group(2).rstrip("/")
    options = (containers.get(MODEL_CONTAINER, {}).get("logConfiguration") or {}).get("options") or {}
    return ProfileTask(definition["family"], bucket, prefix, options.get("awslogs-group"), options.get("awslogs-stream-prefix"))


def profile_of(registry: Registry, name: str) -> ServingProfile:
    """The registry's profile, or NotDeployed naming the ones there are."""
    if name not in registry.profiles:
        raise NotDeployed(f"no profile {name!r} in the registry (profiles: {', '.join(sorted(registry.profiles))})")
    return registry.profiles[name]
