"""`servingctl doctor`: read-only checks of what a first start needs, one line each with pass or
fail and, for a failure, the fix: credentials and region, the SAM stack and its outputs, the
registry, the G and VT vCPU quota against the pools, each pool's AMI, each profile's weights in S3,
the private subnets' way out (NAT gateway or VPC endpoints), and the REST API answering.

Each check is a plain function of the AWS session and what earlier checks found; one that needs
what an earlier check could not give is reported as not run (a failure too). Exit 0 when every
check passes, 1 otherwise, 3 with no AWS to talk to.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from servingctl import render
from servingctl_cli.aws import (
    Aws,
    NotDeployed,
    Stack,
    add_aws_arguments,
    connect_aws,
    describe_stack,
    profile_task,
    read_registry,
)
from servingctl_cli.client import EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, ApiError, Unreachable, connect
from servingctl_cli.main import summary

# Service Quotas: EC2's running On-Demand vCPU quota of each GPU family (the family's prefixes).
QUOTAS = {"L-DB2E81BA": ("Running On-Demand G and VT instances", ("g", "vt"))}
GPU_AMI_PARAMETER = "/aws/service/ecs/optimized-ami/amazon-linux-2023/gpu/recommended/image_id"
# The interface endpoints a VPC without a NAT gateway needs for ECS on EC2 with images in ECR and
# awslogs (AWS's ECS and ECR interface endpoint guides), plus S3's gateway endpoint (image layers, weights).
INTERFACE_ENDPOINTS = ("ecr.api", "ecr.dkr", "ecs", "ecs-agent", "ecs-telemetry", "logs", "sts")
STACK_READY = ("CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE", "IMPORT_COMPLETE")
INDEX_FILE = "model.safetensors.index.json"
# A checkpoint in S3 smaller than this share of the registry's weights_gb is taken as incomplete.
WEIGHTS_COMPLETE_SHARE = 0.9
# Continuation lines and fixes sit under the check's name, past "PASS  ".
INDENT = 6


@dataclass(frozen=True)
class Result:
    """One check's verdict: its name, pass or fail, what it found and, for a failure, the fix."""

    name: str
    ok: bool
    detail: str
    fix: str = ""


@dataclass
class Found:
    """What the checks learned so far (later checks use it)."""

    aws: Aws
    stack_name: str
    aws_profile: str | None
    stack: Stack | None = None
    registry: Any = None
    results: list[Result] = field(default_factory=list)


class Failed(Exception):
    """A check's failure: what was found and the fix."""

    def __init__(self, detail: str, fix: str) -> None:
        super().__init__(detail)
        self.detail, self.fix = detail, fix


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `doctor`."""
    parser = subparsers.add_parser("doctor", help=summary("doctor"))
    add_aws_arguments(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=_doctor)


def check_credentials(found: Found) -> str:
    """Who the credentials are, in which region."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        who = found.aws.client("sts").get_caller_identity()
    except (ClientError, BotoCoreError) as exc:
        raise Failed(
            f"no usable AWS credentials ({exc})",
            "configure credentials: `aws configure`, `aws sso login`, AWS_PROFILE or --aws-profile",
        ) from None
    return f"{who['Arn']} in {found.aws.region}"


def check_stack(found: Found) -> str:
    """The SAM stack exists, is complete and has the outputs and parameters the CLI reads."""
    try:
        stack = describe_stack(found.aws, found.stack_name)
    except NotDeployed as exc:
        raise Failed(str(exc), "deploy it: `sam deploy` (README, Deploy), or pass --stack / --region") from None
    if stack.status not in STACK_READY:
        raise Failed(f"stack {stack.name} is {stack.status}", "see its events: `aws cloudformation describe-stack-events`")
    missing = [n for n in ("ApiUrl",) if n not in stack.outputs] + [
        n for n in ("RegistryPath", "PrivateSubnetIds") if not stack.parameters.get(n)
    ]
    if missing:
        raise Failed(f"stack {stack.name} lacks {', '.join(missing)}", "redeploy with this repository's template: `sam deploy`")
    found.stack = stack
    return f"{stack.name} {stack.status}, API {stack.outputs['ApiUrl']}"


def check_registry(found: Found) -> str:
    """The registry the stack names is published and valid."""
    assert found.stack is not None
    try:
        found.registry = read_registry(found.aws, found.stack)
    except (NotDeployed, ValueError) as exc:
        raise Failed(
            f"registry at {found.stack.parameters['RegistryPath']}: {exc}", "publish it: `terraform apply` in infra/terraform"
        ) from None
    return (
        f"{len(found.registry.profiles)} profiles, {len(found.registry.pools)} pools at {found.stack.parameters['RegistryPath']}"
    )


def _vcpus(aws: Aws, types: list[str]) -> dict[str, int]:
    answer = aws.client("ec2").describe_instance_types(InstanceTypes=types)["InstanceTypes"]
    return {t["InstanceType"]: int(t["VCpuInfo"]["DefaultVCpus"]) for t in answer}


def _applied_quota(aws: Aws, code: str) -> float:
    """The quota's applied value, else its default (GetServiceQuota has no value for an unchanged quota)."""
    quotas = aws.client("service-quotas")
    try:
        return float(quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"])
    except quotas.exceptions.NoSuchResourceException:
        return float(quotas.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"])


def check_quota(found: Found) -> str:
    """The G and VT vCPU quota covers the largest pool (and says whether it covers all at once)."""
    pools = found.registry.pools
    vcpus = _vcpus(found.aws, sorted({p.instance_type for p in pools.values()}))
    lines = []
    for code, (name, families) in QUOTAS.items():
        needs = {n: vcpus[p.instance_type] for n, p in pools.items() if p.instance_type.startswith(families)}
        if not needs:
            continue
        quota = _applied_quota(found.aws, code)
        largest = max(needs, key=lambda n: needs[n])
        total = sum(needs.values())
        text = (
            f"{code} {name}: {quota:g} vCPUs; pool {largest} needs {needs[largest]} ({pools[largest].instance_type}), "
            f"all {len(needs)} pools at once {total}"
        )
        if quota < needs[largest]:
            raise Failed(
                text,
                f"request {total} vCPUs: `aws service-quotas request-service-quota-increase --service-code ec2 "
                f"--quota-code {code} --desired-value {total} --region {found.aws.region}`",
            )
        lines.append(text + ("" if quota >= total else " (enough for one pool at a time)"))
    return "; ".join(lines) or "no pool of a quota-checked GPU family"


def check_ami(found: Found) -> str:
    """Each pool's launch template names an AMI that exists and is available in the region."""
    from botocore.exceptions import ClientError

    ec2 = found.aws.client("ec2")
    images: dict[str, str] = {}
    for name, pool in sorted(found.registry.pools.items()):
        template = pool.launch_template_id
        if template is None:
            continue
        [version] = ec2.describe_launch_template_versions(LaunchTemplateId=template, Versions=["$Default"])[
            "LaunchTemplateVersions"
        ]
        images[name] = version["LaunchTemplateData"].get("ImageId", "")
    fix = f"`terraform apply` in infra/terraform (the launch templates re-read {GPU_AMI_PARAMETER} in {found.aws.region})"
    states: dict[str, str] = {}
    for image in sorted(set(images.values())):
        try:
            answer = ec2.describe_images(ImageIds=[image])["Images"]
        except ClientError:
            answer = []
        states[image] = answer[0].get("State", "available") if answer else "missing"
    bad = {pool: image for pool, image in images.items() if states[image] != "available"}
    if bad:
        raise Failed(", ".join(f"pool {p}: AMI {i} {states[i]} in {found.aws.region}" for p, i in bad.items()), fix)
    return ", ".join(f"{p}: {i}" for p, i in images.items()) + " available"


def _listing(s3: Any, bucket: str, prefix: str) -> dict[str, int]:
    return {
        obj["Key"]: obj["Size"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
        for obj in page.get("Contents", [])
    }


def _main_ref(s3: Any, bucket: str, tree: str) -> str | None:
    """The snapshot tree/refs/main names (None when there is no refs/main)."""
    from botocore.exceptions import ClientError

    try:
        return str(s3.get_object(Bucket=bucket, Key=f"{tree}/refs/main")["Body"].read().decode())
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
            return None
        raise


def weights_problem(s3: Any, bucket: str, tree: str, revision: str | None, weights_gb: float | None) -> tuple[str, bool]:
    """(what is in s3://bucket/tree/snapshots/<revision>/, True when complete): files, size, and the
    index file with every shard it names. A profile that pins no revision loads the snapshot
    refs/main names (Hugging Face's cache, read offline as the tasks do), so that is the one checked."""
    listing = _listing(s3, bucket, f"{tree}/snapshots")
    snapshots = sorted({key[len(tree) + len("/snapshots/") :].split("/", 1)[0] for key in listing})
    where = f"s3://{bucket}/{tree}/snapshots/"
    if not snapshots:
        return f"nothing under {where}", False
    snapshot, named = revision, "pinned"
    if not revision:
        snapshot, named = _main_ref(s3, bucket, tree), "refs/main's: no revision pinned"
        if snapshot is None:
            return (
                f"no revision pinned and no s3://{bucket}/{tree}/refs/main: the model server, offline, cannot tell "
                f"which snapshot to load (found {', '.join(snapshots)}; pin serving.revision in the registry, or "
                "upload the Hugging Face cache tree, which holds refs/main)",
                False,
            )
    if snapshot not in snapshots:
        return f"no snapshot {snapshot!r} ({named}) under {where} (found {', '.join(snapshots)})", False
    base = f"{tree}/snapshots/{snapshot}/"
    files = {key[len(base) :]: size for key, size in listing.items() if key.startswith(base)}
    total = sum(files.values())
    text = f"{where}{snapshot} ({named}): {len(files)} files, {total / 1e9:.2f} GB"
    if INDEX_FILE not in files:
        return f"{text}; no {INDEX_FILE}", False
    index = json.loads(s3.get_object(Bucket=bucket, Key=base + INDEX_FILE)["Body"].read())
    shards = sorted(set(index.get("weight_map", {}).values()))
    absent = [s for s in shards if s not in files]
    if absent:
        return f"{text}; {len(absent)} of {len(shards)} shards the index names are missing ({', '.join(absent[:3])})", False
    if weights_gb and total < WEIGHTS_COMPLETE_SHARE * weights_gb * 1e9:
        return f"{text}; the registry expects about {weights_gb:g} GB", False
    return f"{text}, index and its {len(shards)} shards present", True


def check_weights(found: Found) -> str:
    """Each profile with S3 weights has its revision's snapshot there, complete."""
    s3 = found.aws.client("s3")
    lines: list[str] = []
    bad: list[str] = []
    for name, profile in sorted(found.registry.profiles.items()):
        task = profile_task(found.aws, profile)
        if task.weights_bucket is None or task.weights_prefix is None:
            lines.append(f"{name}: from the hub at start")
            continue
        weights_gb = profile.load.weights_gb if profile.load else None
        text, complete = weights_problem(s3, task.weights_bucket, task.weights_prefix, profile.serving.revision, weights_gb)
        (lines if complete else bad).append(f"{name}: {text}")
    if bad:
        names = [line.split(":", 1)[0] for line in bad]
        raise Failed(
            "; ".join(bad),
            " and ".join(f"`servingctl weights upload DIR --profile {n}`" for n in names)
            + " (README, Deploy: download with `huggingface-cli download` first)",
        )
    return "; ".join(lines)


def check_network(found: Found) -> str:
    """The private subnets reach ECR, ECS, CloudWatch Logs and S3: through an available NAT gateway,
    or through VPC endpoints."""
    assert found.stack is not None
    ec2 = found.aws.client("ec2")
    subnets = [s for s in found.stack.parameters["PrivateSubnetIds"].split(",") if s]
    [vpc] = {s["VpcId"] for s in ec2.describe_subnets(SubnetIds=subnets)["Subnets"]}
    tables = ec2.describe_route_tables(Filters=[{"Name": "association.subnet-id", "Values": subnets}])["RouteTables"]
    covered = {a.get("SubnetId") for t in tables for a in t.get("Associations", [])}
    if not covered >= set(subnets):  # a subnet without its own table uses the VPC's main one
        tables += ec2.describe_route_tables(
            Filters=[{"Name": "vpc-id", "Values": [vpc]}, {"Name": "association.main", "Values": ["true"]}]
        )["RouteTables"]
    nats = {
        r["NatGatewayId"]
        for t in tables
        for r in t["Routes"]
        if r.get("DestinationCidrBlock") == "0.0.0.0/0" and r.get("NatGatewayId")
    }
    available = (
        [
            n["NatGatewayId"]
            for n in ec2.describe_nat_gateways(NatGatewayIds=sorted(nats))["NatGateways"]
            if n["State"] == "available"
        ]
        if nats
        else []
    )
    if available:
        return f"NAT gateway {', '.join(available)} (available) for {', '.join(subnets)}"
    endpoints = ec2.describe_vpc_endpoints(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["VpcEndpoints"]
    service_prefix = f"com.amazonaws.{found.aws.region}."
    present = {e["ServiceName"].removeprefix(service_prefix) for e in endpoints if e.get("State", "").lower() == "available"}
    missing = [s for s in ("s3", *INTERFACE_ENDPOINTS) if s not in present]
    if missing:
        raise Failed(
            f"no available NAT gateway on the private subnets' routes and no VPC endpoint for {', '.join(missing)} in {vpc}",
            "`terraform apply` in infra/terraform (modules/network makes the NAT gateway)",
        )
    return f"no NAT gateway; VPC endpoints for {', '.join(('s3', *INTERFACE_ENDPOINTS))} in {vpc}"


def check_api(found: Found) -> str:
    """The REST API answers a signed GET /profiles."""
    assert found.stack is not None
    url = found.stack.outputs["ApiUrl"]
    target = argparse.Namespace(api_url=url, local=False, aws_profile=found.aws_profile, region=found.aws.region)
    try:
        client = connect(target)
        try:
            profiles = client.get("/profiles")
        finally:
            client.close()
    except Unreachable as exc:
        raise Failed(str(exc), "check the URL (stack output ApiUrl) and this machine's network") from None
    except ApiError as exc:
        fix = (
            "the caller needs execute-api:Invoke on the API (infra/iam/servingctl-cli-policy.json)"
            if exc.status == 403
            else "see the API's logs"
        )
        raise Failed(f"{url} answered {exc.status}: {exc.message}", fix) from None
    return f"{url} answers: {len(profiles)} profiles"


# (name, check, the earlier checks it needs)
CHECKS: tuple[tuple[str, Callable[[Found], str], tuple[str, ...]], ...] = (
    ("credentials", check_credentials, ()),
    ("stack", check_stack, ("credentials",)),
    ("registry", check_registry, ("stack",)),
    ("gpu quota", check_quota, ("registry",)),
    ("ami", check_ami, ("registry",)),
    ("weights", check_weights, ("registry",)),
    ("network", check_network, ("stack",)),
    ("api", check_api, ("stack",)),
)


def run_checks(found: Found) -> list[Result]:
    """Every check in order; one whose prerequisite failed is not run (and fails)."""
    from botocore.exceptions import BotoCoreError, ClientError

    passed: set[str] = set()
    for name, check, needs in CHECKS:
        unmet = [n for n in needs if n not in passed]
        if unmet:
            found.results.append(Result(name, False, f"not run: needs {', '.join(unmet)}", f"fix {unmet[0]} first"))
            continue
        try:
            found.results.append(Result(name, True, check(found)))
            passed.add(name)
        except Failed as exc:
            found.results.append(Result(name, False, exc.detail, exc.fix))
        except (ClientError, BotoCoreError, NotDeployed) as exc:
            # A refused read (AccessDenied) or a missing resource: said as AWS said it.
            found.results.append(
                Result(name, False, str(exc), "see infra/iam/servingctl-cli-policy.json for the permissions doctor needs")
            )
    return found.results


def _doctor(args: argparse.Namespace) -> int:
    try:
        aws = connect_aws(args)
    except Unreachable as exc:
        print(f"servingctl doctor: error: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    results = run_checks(Found(aws, args.stack, args.aws_profile))
    if args.json:
        print(json.dumps({"ok": all(r.ok for r in results), "checks": [asdict(r) for r in results]}))
    else:
        print("\n".join(report_lines(results)))
    return EXIT_OK if all(r.ok for r in results) else EXIT_FAILED


def report_lines(results: list[Result], columns: int | None = None) -> list[str]:
    """One PASS/FAIL line per check and its fix, wrapped at the terminal width under the verdict."""
    columns = columns or render.width()
    lines: list[str] = []
    for result in results:
        said = render.wrap(f"{'PASS' if result.ok else 'FAIL'}  {result.name}: {result.detail}", columns, INDENT)
        fix = render.wrap(f"fix: {result.fix}", columns, INDENT) if result.fix else []
        lines += [said[0], *(" " * INDENT + line for line in said[1:] + fix)]
    failed = sum(not r.ok for r in results)
    return [*lines, f"{len(results) - failed} passed, {failed} failed"]
