"""The commands that call AWS directly (`doctor`, `weights upload`, `logs`, `endpoint`) as a person runs
them, each a process of its own, against one twin found through its state file: doctor green, then
each of its checks made to fail; an upload interrupted and resumed with the objects' checksums equal
to the files'; a corrupted object found and replaced; logs read and followed; and every command run
with exactly infra/iam/servingctl-cli-policy.json (its AWS calls decided by the twin's IAM, its API
calls by the twin's API Gateway), one failing when an action it needs is removed."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from servingctl_cli.weights import object_checksum, part_size_for, read_parts
from servingctl_twin import patching
from servingctl_twin.apigateway.apigw import API_ID, LOCAL_PRINCIPAL
from servingctl_twin.iam.task_iam import ENV as TASK_IAM_ENV
from servingctl_twin.iam.task_iam import TaskIam, recorded_calls
from servingctl_twin.servicequotas.patches import G_AND_VT, Quotas
from servingctl_twin.twin import SSM_PATH, STACK, WEIGHTS_PREFIX, Twin
from servingctl_twin.world import Delays

ROOT = Path(__file__).resolve().parents[3]
POLICY = ROOT / "infra/iam/servingctl-cli-policy.json"
CLI = [sys.executable, "-m", "servingctl_cli.main"]
AS_POLICY = [sys.executable, "-m", "servingctl_twin.iam.task_iam", "-m", "servingctl_cli.main"]
NANO, DEEPSEEK = "nemotron-nano", "deepseek-v4-flash"
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def twin() -> Iterator[Twin]:
    with Twin(model_server="sim", time_scale=100.0, delays=Delays().scaled(0.1), api_port=0) as running:
        yield running


@pytest.fixture(scope="module")
def env(twin: Twin, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a person's shell that finds the twin by its state file."""
    cache = tmp_path_factory.mktemp("cache")
    (cache / "servingctl").mkdir()
    record = {
        "api_url": twin.api_url,
        "pid": os.getpid(),
        "poll": twin.scaled_poll(),
        "region": twin.region,
        "aws_endpoint_url": twin.endpoint_url,
    }
    (cache / "servingctl" / "twin.json").write_text(json.dumps(record))
    drop = ("SERVINGCTL_API_URL", "AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "COLUMNS")
    return {k: v for k, v in os.environ.items() if k not in drop} | {"XDG_CACHE_HOME": str(cache)}


def run(
    env: dict[str, str], *argv: str, prefix: list[str] = CLI, extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The command as a process; its exit code and output."""
    return subprocess.run([*prefix, *argv], env=env | (extra or {}), capture_output=True, text=True, timeout=600, check=False)


def hub_tree(root: Path, model_id: str, revision: str, shard_mib: tuple[int, ...]) -> Path:
    """A Hugging Face cache tree as `huggingface-cli download --cache-dir root` leaves it: blobs/,
    snapshots/<revision>/ of symlinks into it, refs/main; safetensors shards and their index."""
    tree = root / ("models--" + model_id.replace("/", "--"))
    files: dict[str, bytes] = {"config.json": b'{"model_type": "twin"}'}
    names = [f"model-{i:05d}-of-{len(shard_mib):05d}.safetensors" for i in range(1, len(shard_mib) + 1)]
    for name, size in zip(names, shard_mib, strict=True):
        files[name] = os.urandom(size * MIB)
    files["model.safetensors.index.json"] = json.dumps({"weight_map": {f"layer.{i}": n for i, n in enumerate(names)}}).encode()
    (tree / "blobs").mkdir(parents=True)
    (tree / "snapshots" / revision).mkdir(parents=True)
    (tree / "refs").mkdir()
    for name, data in files.items():
        blob = hashlib.sha256(data).hexdigest()
        (tree / "blobs" / blob).write_bytes(data)
        (tree / "snapshots" / revision / name).symlink_to(f"../../blobs/{blob}")
    (tree / "refs" / "main").write_text(revision)
    return tree


def key_of(twin: Twin, profile: str, revision: str, name: str) -> str:
    """The S3 key of a snapshot file of the profile's model (Terraform's prefetch source)."""
    model_id = twin.registry.profiles[profile].serving.model_id  # type: ignore[union-attr]
    return f"{WEIGHTS_PREFIX}/models--{model_id.replace('/', '--')}/snapshots/{revision}/{name}"


def revision_of(twin: Twin, profile: str) -> str:
    """The profile's pinned revision, or the one this module gives an unpinned profile's upload."""
    return twin.registry.profiles[profile].serving.revision or "1" * 40  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def uploaded(twin: Twin, env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Both profiles' weights uploaded with `weights upload` (the precondition of a green doctor)."""
    trees = {}
    for profile in (NANO, DEEPSEEK):
        root = tmp_path_factory.mktemp(f"hub-{profile}")
        revision = revision_of(twin, profile)
        tree = hub_tree(root, twin.registry.profiles[profile].serving.model_id, revision, (6, 1))  # type: ignore[union-attr]
        answer = run(env, "weights", "upload", str(root), "--profile", profile, "--part-size-mib", "5", "--revision", revision)
        assert answer.returncode == 0, answer.stderr
        assert answer.stdout.count("uploaded") == 5 and "uploaded in 2 parts" in answer.stdout  # 6 MiB shard: 5 + 1 MiB
        trees[profile] = tree
    return trees


def doctor(env: dict[str, str], *argv: str) -> tuple[int, dict[str, dict[str, Any]]]:
    """doctor --json: its exit code and each check's result by name."""
    answer = run(env, "doctor", "--json", *argv)
    return answer.returncode, {c["name"]: c for c in json.loads(answer.stdout)["checks"]}


def test_doctor_green(twin: Twin, env: dict[str, str], uploaded: dict[str, Path]) -> None:
    answer = run(env, "doctor")
    assert answer.returncode == 0, answer.stdout + answer.stderr
    lines = answer.stdout.splitlines()
    # a verdict per check; its detail and fix wrap under it (indented) at the terminal's width
    assert [line.split()[0] for line in lines[:-1] if not line.startswith(" ")] == ["PASS"] * 8, answer.stdout
    assert lines[-1] == "8 passed, 0 failed"
    text = " ".join(answer.stdout.split())
    assert "L-DB2E81BA Running On-Demand G and VT instances: 64 vCPUs; pool g7e-2gpu needs 48 (g7e.12xlarge)" in text
    assert "index and its 2 shards present" in text and "NAT gateway nat-" in text
    # The unpinned profile's check says which snapshot it read: the one refs/main names.
    assert f"snapshots/{revision_of(twin, NANO)} (refs/main's: no revision pinned): " in text


def test_doctor_each_failure(twin: Twin, env: dict[str, str], uploaded: dict[str, Path]) -> None:
    quotas = patching.part_of(twin.region, Quotas)
    assert quotas is not None
    # The quota at the largest pool's need passes (one pool at a time); one vCPU less fails with the fix.
    for value, ok in ((48.0, True), (47.0, False)):
        quotas.applied[("ec2", G_AND_VT)] = value
        code, checks = doctor(env)
        assert (code, checks["gpu quota"]["ok"]) == (0 if ok else 1, ok), checks["gpu quota"]
    assert "enough for one pool at a time" not in checks["gpu quota"]["detail"]
    assert "--quota-code L-DB2E81BA --desired-value 56 --region us-east-1" in checks["gpu quota"]["fix"]
    assert [n for n, c in checks.items() if not c["ok"]] == ["gpu quota"]
    quotas.applied[("ec2", G_AND_VT)] = 64.0

    # The launch template's AMI gone from the region.
    ec2 = twin.client("ec2")
    template = twin.registry.pools["g7e-2gpu"].launch_template_id  # type: ignore[union-attr]
    ec2.create_launch_template_version(
        LaunchTemplateId=template, SourceVersion="1", LaunchTemplateData={"ImageId": "ami-0000000000deadbee"}
    )
    ec2.modify_launch_template(LaunchTemplateId=template, DefaultVersion="2")
    code, checks = doctor(env)
    assert code == 1 and not checks["ami"]["ok"] and "pool g7e-2gpu: AMI ami-0000000000deadbee missing" in checks["ami"]["detail"]
    assert "terraform apply" in checks["ami"]["fix"]
    ec2.modify_launch_template(LaunchTemplateId=template, DefaultVersion="1")

    # A shard the index names is missing.
    s3 = twin.client("s3")
    shard = key_of(twin, NANO, revision_of(twin, NANO), "model-00002-of-00002.safetensors")
    s3.delete_object(Bucket=twin.weights_bucket, Key=shard)
    code, checks = doctor(env)
    assert (
        code == 1
        and "1 of 2 shards the index names are missing (model-00002-of-00002.safetensors)" in checks["weights"]["detail"]
    )
    assert (
        f"servingctl weights upload DIR --profile {NANO}" in checks["weights"]["fix"] and DEEPSEEK not in checks["weights"]["fix"]
    )
    answer = run(
        env,
        "weights",
        "upload",
        str(uploaded[NANO]),
        "--profile",
        NANO,
        "--part-size-mib",
        "5",
        "--revision",
        revision_of(twin, NANO),
    )
    assert answer.returncode == 0 and answer.stdout.count("unchanged") == 4 and f"uploaded  {shard}" in answer.stdout

    # A profile that pins no revision loads the snapshot refs/main names (offline): without refs/main it fails.
    assert twin.registry.profiles[NANO].serving.revision is None  # type: ignore[union-attr]
    refs = key_of(twin, NANO, revision_of(twin, NANO), "").split("/snapshots/")[0] + "/refs/main"
    kept = s3.get_object(Bucket=twin.weights_bucket, Key=refs)["Body"].read()
    s3.delete_object(Bucket=twin.weights_bucket, Key=refs)
    code, checks = doctor(env)
    assert code == 1 and f"{NANO}: no revision pinned and no s3://{twin.weights_bucket}/" in checks["weights"]["detail"]
    assert "the model server, offline, cannot tell which snapshot to load" in checks["weights"]["detail"]
    s3.put_object(Bucket=twin.weights_bucket, Key=refs, Body=kept)

    # No way out of the private subnets: the NAT route removed, no VPC endpoints but S3's.
    [table] = ec2.describe_route_tables(Filters=[{"Name": "association.subnet-id", "Values": twin.private_subnets}])[
        "RouteTables"
    ]
    nat = next(r["NatGatewayId"] for r in table["Routes"] if r.get("NatGatewayId"))
    ec2.delete_route(RouteTableId=table["RouteTableId"], DestinationCidrBlock="0.0.0.0/0")
    code, checks = doctor(env)
    assert code == 1 and not checks["network"]["ok"]
    assert "no VPC endpoint for ecr.api, ecr.dkr, ecs, ecs-agent, ecs-telemetry, logs, sts" in checks["network"]["detail"]
    ec2.create_route(RouteTableId=table["RouteTableId"], DestinationCidrBlock="0.0.0.0/0", NatGatewayId=nat)

    # The registry's index parameter gone: the checks that need the registry are not run.
    ssm = twin.client("ssm")
    index = ssm.get_parameter(Name=f"{SSM_PATH}/index")["Parameter"]["Value"]
    ssm.delete_parameter(Name=f"{SSM_PATH}/index")
    code, checks = doctor(env)
    assert code == 1 and "missing: the registry is not published under this path" in checks["registry"]["detail"]
    assert [checks[n]["detail"] for n in ("gpu quota", "ami", "weights")] == ["not run: needs registry"] * 3
    ssm.put_parameter(Name=f"{SSM_PATH}/index", Value=index, Type="String")

    # The API refuses the caller (no identity policy allows execute-api:Invoke).
    assert twin.api is not None
    twin.api.add_principal(dataclasses.replace(LOCAL_PRINCIPAL, policy=()))
    code, checks = doctor(env)
    twin.api.add_principal(LOCAL_PRINCIPAL)
    assert code == 1 and "answered 403" in checks["api"]["detail"] and "execute-api:Invoke" in checks["api"]["fix"]

    # Another stack name, and no credentials at all (AWS itself, every file and variable pointed away).
    code, checks = doctor(env, "--stack", "nosuch")
    assert code == 1 and checks["stack"]["detail"] == "no CloudFormation stack 'nosuch' in us-east-1"
    assert all(checks[n]["detail"].startswith("not run") for n in ("registry", "network", "api"))
    nowhere = {
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
        "AWS_CONFIG_FILE": "/nonexistent",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    answer = run(
        {k: v for k, v in env.items() if not k.startswith("AWS_ACCESS") and not k.startswith("AWS_SECRET")},
        "doctor",
        "--json",
        "--region",
        "us-east-1",
        extra=nowhere,
    )
    checks = {c["name"]: c for c in json.loads(answer.stdout)["checks"]}
    assert answer.returncode == 1 and "Unable to locate credentials" in checks["credentials"]["detail"]
    assert "aws configure" in checks["credentials"]["fix"] and sum(c["ok"] for c in checks.values()) == 0

    assert doctor(env)[0] == 0  # everything restored


def test_twin_refuses_a_wrong_checksum(twin: Twin) -> None:
    """S3 answers BadDigest to a body whose SHA256 is not the one sent (the twin as well)."""
    s3 = twin.client("s3")
    wrong = base64.b64encode(hashlib.sha256(b"other").digest()).decode()
    with pytest.raises(ClientError, match="BadDigest"):
        s3.put_object(Bucket=twin.weights_bucket, Key="x/y", Body=b"body", ChecksumSHA256=wrong)
    upload = s3.create_multipart_upload(Bucket=twin.weights_bucket, Key="x/z", ChecksumAlgorithm="SHA256")["UploadId"]
    with pytest.raises(ClientError, match="BadDigest"):
        s3.upload_part(Bucket=twin.weights_bucket, Key="x/z", UploadId=upload, PartNumber=1, Body=b"body", ChecksumSHA256=wrong)
    s3.abort_multipart_upload(Bucket=twin.weights_bucket, Key="x/z", UploadId=upload)


def test_upload_interrupted_resumed_and_corruption_replaced(twin: Twin, env: dict[str, str], tmp_path: Path) -> None:
    model = tmp_path / "model"  # a plain model directory (huggingface-cli download --local-dir)
    model.mkdir()
    big = model / "model-00001-of-00001.safetensors"
    big.write_bytes(os.urandom(120 * MIB))
    (model / "config.json").write_text("{}")
    revision = "2" * 40
    key = key_of(twin, NANO, revision, big.name)
    s3 = twin.client("s3")
    argv = [
        "weights",
        "upload",
        str(model),
        "--profile",
        NANO,
        "--revision",
        revision,
        "--part-size-mib",
        "5",
        "--concurrency",
        "1",
    ]
    process = subprocess.Popen([*CLI, *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline, parts = time.monotonic() + 300, 0
    while parts < 3:  # interrupt it once 3 of its 24 parts are in S3
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        uploads = [u for u in s3.list_multipart_uploads(Bucket=twin.weights_bucket).get("Uploads", []) if u["Key"] == key]
        parts = (
            len(s3.list_parts(Bucket=twin.weights_bucket, Key=key, UploadId=uploads[0]["UploadId"]).get("Parts", []))
            if uploads
            else 0
        )
        time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, out + err
    assert "run the same command again to resume" in err and "Traceback" not in err
    [upload] = [u for u in s3.list_multipart_uploads(Bucket=twin.weights_bucket)["Uploads"] if u["Key"] == key]
    kept = s3.list_parts(Bucket=twin.weights_bucket, Key=key, UploadId=upload["UploadId"])["Parts"]
    assert 3 <= len(kept) < 24 and all(p["ChecksumSHA256"] for p in kept)

    answer = run(env, *argv)
    assert answer.returncode == 0, answer.stderr
    assert f"uploaded in 24 parts, {len(kept)} already there  {key}" in answer.stdout
    # NANO pins no revision and refs/main names the module's snapshot: a plain directory leaves it be.
    refs = key.split("/snapshots/")[0] + "/refs/main"
    served = s3.get_object(Bucket=twin.weights_bucket, Key=refs)["Body"].read().decode()
    assert served == revision_of(twin, NANO) and f"refs/main names {served} and stays" in answer.stdout
    expected = object_checksum(read_parts(big, part_size_for(big.stat().st_size, 5), lambda n: None))
    head = s3.head_object(Bucket=twin.weights_bucket, Key=key, ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"].split("-")[0] == expected.split("-")[0] and head["ContentLength"] == 120 * MIB
    body = s3.get_object(Bucket=twin.weights_bucket, Key=key)["Body"].read()
    assert hashlib.sha256(body).digest() == hashlib.sha256(big.read_bytes()).digest()
    assert not [u for u in s3.list_multipart_uploads(Bucket=twin.weights_bucket).get("Uploads", []) if u["Key"] == key]

    # Unchanged files are skipped; an object whose content differs is found and replaced.
    config = key_of(twin, NANO, revision, "config.json")
    s3.put_object(
        Bucket=twin.weights_bucket,
        Key=config,
        Body=b"{corrupted}",
        ChecksumSHA256=base64.b64encode(hashlib.sha256(b"{corrupted}").digest()).decode(),
    )
    answer = run(env, *argv)
    assert answer.returncode == 0 and f"unchanged  {key}" in answer.stdout
    assert f"uploaded  {config} (the object there had another checksum: replaced)" in answer.stdout
    assert s3.get_object(Bucket=twin.weights_bucket, Key=config)["Body"].read() == b"{}"
    # With no refs/main in S3 the upload writes it, after the snapshot; --set-main moves an existing one.
    s3.delete_object(Bucket=twin.weights_bucket, Key=refs)
    answer = run(env, *argv)
    assert answer.returncode == 0 and f"refs/main -> {revision}: profile {NANO} pins no revision" in answer.stdout
    assert answer.stdout.index(f"unchanged  {key}") < answer.stdout.index(f"uploaded  {refs}")
    assert s3.get_object(Bucket=twin.weights_bucket, Key=refs)["Body"].read() == revision.encode()
    s3.put_object(Bucket=twin.weights_bucket, Key=refs, Body=served.encode())
    answer = run(env, *argv, "--set-main")
    assert answer.returncode == 0 and f"refs/main -> {revision}" in answer.stdout, answer.stdout + answer.stderr
    assert s3.get_object(Bucket=twin.weights_bucket, Key=refs)["Body"].read() == revision.encode()
    s3.put_object(Bucket=twin.weights_bucket, Key=refs, Body=served.encode())  # the module's snapshot again
    # This snapshot has no index file and refs/main does not name it: doctor does not read it, but a
    # later upload of a cache tree naming it would. Removed, as a user would.
    for name in (big.name, "config.json"):
        s3.delete_object(Bucket=twin.weights_bucket, Key=key_of(twin, NANO, revision, name))


def test_upload_refuses_bad_values(env: dict[str, str], tmp_path: Path) -> None:
    for flag, value, allowed in (
        ("--part-size-mib", "4", "from 5 to 5120"),
        ("--part-size-mib", "5121", "from 5 to 5120"),
        ("--concurrency", "0", "from 1 to 64"),
    ):
        answer = run(env, "weights", "upload", str(tmp_path), "--profile", NANO, flag, value)
        assert answer.returncode == 2 and f"{flag} must be {allowed}" in answer.stderr and "Traceback" not in answer.stderr
    for value in ("5", "5120"):  # S3's bounds themselves are accepted (then the empty DIR is refused)
        answer = run(env, "weights", "upload", str(tmp_path), "--profile", NANO, "--part-size-mib", value)
        assert (answer.returncode == 2 and "--revision" in answer.stderr) or "no files" in answer.stderr
    answer = run(env, "weights", "upload", str(tmp_path), "--profile", "nosuch")
    assert (
        answer.returncode == 1
        and "no profile 'nosuch' in the registry (profiles: deepseek-v4-flash, nemotron-nano)" in answer.stderr
    )


def _put_lines(twin: Twin, profile: str, lines: list[str], task: str = "0123456789abcdef") -> None:
    """Lines in the profile's vllm stream, as the awslogs driver of its task definition writes them."""
    spec = twin.registry.profiles[profile]  # type: ignore[union-attr]
    logs, group, stream = twin.client("logs"), f"/ecs/{spec.service}", f"{profile}/vllm/{task}"
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_stream(logGroupName=group, logStreamName=stream)
    now = int(time.time() * 1000)
    logs.put_log_events(
        logGroupName=group, logStreamName=stream, logEvents=[{"timestamp": now + i, "message": m} for i, m in enumerate(lines)]
    )


def test_logs_read_and_followed(twin: Twin, env: dict[str, str]) -> None:
    answer = run(env, "logs", DEEPSEEK)
    assert (
        answer.returncode == 0 and "no log lines in /ecs/self-hosted-llm-poc-deepseek-v4-flash since 10m (vllm)" in answer.stderr
    )
    _put_lines(twin, DEEPSEEK, ["INFO loading weights", "INFO engine ready"])
    answer = run(env, "logs", DEEPSEEK, "--since", "1m")
    assert answer.returncode == 0 and [line.split(" ", 2)[1:] for line in answer.stdout.splitlines()] == [
        ["vllm/01234567", "INFO loading weights"],
        ["vllm/01234567", "INFO engine ready"],
    ]
    assert run(env, "logs", DEEPSEEK, "--since", "yesterday").returncode == 2
    follower = subprocess.Popen(
        [*CLI, "logs", DEEPSEEK, "--follow", "--since", "1m", "--poll", "0.2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert follower.stdout is not None
    time.sleep(3)
    _put_lines(twin, DEEPSEEK, ["INFO Application startup complete."])
    deadline, seen = time.monotonic() + 60, ""
    while "startup complete" not in seen and time.monotonic() < deadline:
        if select.select([follower.stdout], [], [], 0.2)[0]:
            seen += os.read(follower.stdout.fileno(), 65536).decode()
    follower.send_signal(signal.SIGINT)
    follower.wait(timeout=60)
    assert seen.count("INFO engine ready") == 1 and "INFO Application startup complete." in seen, seen
    assert follower.returncode == 130


def test_endpoint_snippets(twin: Twin, env: dict[str, str]) -> None:
    answer = run(env, "endpoint", NANO, "--json")
    assert answer.returncode == 0, answer.stderr
    found = json.loads(answer.stdout)
    spec = twin.registry.profiles[NANO]  # type: ignore[union-attr]
    assert (found["url"], found["header"], found["model"]) == (spec.endpoint_url, f"X-LLM-Profile: {NANO}", spec.model)
    assert f"curl -sS {spec.endpoint_url}/v1/chat/completions" in found["curl"] and f"-H 'X-LLM-Profile: {NANO}'" in found["curl"]
    assert (
        f"base_url='{spec.endpoint_url}/v1'" in found["openai_python"]
        and "{'X-LLM-Profile': 'nemotron-nano'}" in found["openai_python"]
    )
    compile(found["openai_python"], "snippet", "exec")  # pastes as valid Python
    text = run(env, "endpoint", NANO).stdout
    assert "phase   STOPPED: start it first (servingctl start nemotron-nano --wait)" in text


def rendered_policy(twin: Twin) -> list[dict[str, Any]]:
    """infra/iam/servingctl-cli-policy.json with the twin's names in its placeholders."""
    spec = twin.registry.profiles[NANO]  # type: ignore[union-attr]
    names = {
        "REGION": twin.region,
        "ACCOUNT_ID": patching.ACCOUNT_ID,
        "API_ID": API_ID,
        "STACK_NAME": STACK,
        "REGISTRY_PATH": SSM_PATH.strip("/"),
        "CLUSTER": spec.cluster,
        "WEIGHTS_BUCKET": twin.weights_bucket,
        "WEIGHTS_PREFIX": WEIGHTS_PREFIX,
        "NAME": "self-hosted-llm-poc",
    }
    text = POLICY.read_text()
    for placeholder, value in names.items():
        text = text.replace(placeholder, value)
    return list(json.loads(text)["Statement"])


def test_every_command_works_with_exactly_the_policy(
    twin: Twin, env: dict[str, str], uploaded: dict[str, Path], tmp_path: Path
) -> None:
    statements = rendered_policy(twin)
    calls = tmp_path / "calls.pickle"

    def as_policy(statements: list[dict[str, Any]], *argv: str) -> subprocess.CompletedProcess[str]:
        setup = TaskIam(
            "servingctl-cli", tuple((s["Sid"], s) for s in statements), patching.ACCOUNT_ID, twin.region, {}, str(calls)
        )
        return run(env, *argv, prefix=AS_POLICY, extra={TASK_IAM_ENV: setup.to_env(), "AWS_ENDPOINT_URL": twin.endpoint_url})

    assert twin.api is not None
    twin.api.add_principal(dataclasses.replace(LOCAL_PRINCIPAL, policy=tuple(statements)))
    try:
        fresh = tmp_path / "model"  # a revision not uploaded yet: a multipart upload and a single PUT
        fresh.mkdir()
        (fresh / "model.safetensors").write_bytes(os.urandom(6 * MIB))
        (fresh / "config.json").write_text("{}")
        commands = [
            ["doctor"],
            ["weights", "upload", str(fresh), "--profile", NANO, "--part-size-mib", "5", "--revision", "3" * 40],
            ["logs", DEEPSEEK, "--since", "1h"],
            ["endpoint", NANO],
            ["status"],
            ["runs"],
        ]
        for argv in commands:
            answer = as_policy(statements, *argv)
            assert answer.returncode == 0, (argv, answer.stdout, answer.stderr)
        decided = list(recorded_calls(calls))
        assert decided and all(c.denied is None for c in decided)
        used = {r.action for c in decided for r in c.requests}
        granted = {a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
        # Only what the twin's situation does not need is unused: execute-api:Invoke (decided by the
        # API, above), the default quota (an account with no applied value), the VPC endpoints (a VPC
        # without NAT) and ListParts (resuming an interrupted upload).
        assert granted - used == {
            "execute-api:Invoke",
            "servicequotas:GetAWSDefaultServiceQuota",
            "ec2:DescribeVpcEndpoints",
            "s3:ListMultipartUploadParts",
        }

        # Without logs:FilterLogEvents, `logs` fails with AWS's refusal; without execute-api:Invoke, `status`.
        answer = as_policy([s for s in statements if s["Action"] != "logs:FilterLogEvents"], "logs", DEEPSEEK)
        assert answer.returncode == 1 and "AccessDenied" in answer.stderr and "logs:FilterLogEvents" in answer.stderr
        twin.api.add_principal(
            dataclasses.replace(LOCAL_PRINCIPAL, policy=tuple(s for s in statements if s["Action"] != "execute-api:Invoke"))
        )
        answer = as_policy(statements, "status")
        assert answer.returncode == 1 and "is not authorized to perform: execute-api:Invoke" in answer.stderr
    finally:
        twin.api.add_principal(LOCAL_PRINCIPAL)
