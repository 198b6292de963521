"""The twin as the test bed of run_benchmark: the real ASL files and handlers, the world simulator
and the simulator model server (speed = the twin's time scale).

One twin per module (moto's state is process-wide); AWS's delays are 1/100 of real ones. What the
tests read is what a user would: the execution, the run and scenario items in DynamoDB, the records
in S3, and the AWS state of the profile. Every test leaves its profile as it found it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

from servingctl.store import DynamoStore
from servingctl.store.benchmarks_dynamodb import DynamoBenchmarkStore
from servingctl.store.records import S3RecordStore
from servingctl_cli.client import write_twin_state
from servingctl_cli.main import main
from servingctl_twin.twin import ExecutionResult, Twin
from servingctl_twin.world import Delays

POLL = {"interval_s": 1, "max_interval_s": 2, "backoff": 1.5}
START_OPTIONS = {"poll": POLL, "deadlines": {"capacity_s": 60, "task_s": 60, "health_s": 60}}
STOP_OPTIONS = {"poll": POLL, "deadlines": {"lock_s": 120, "drain_s": 60, "terminate_s": 60}}


class Bench:
    """Runs the state machines on the twin and reads back what they left."""

    def __init__(self, twin: Twin, keep: set[str]) -> None:
        self.twin = twin
        self.keep = keep  # profiles the module keeps READY across its tests
        assert twin.registry is not None
        self.registry = twin.registry
        resource = boto3.resource(
            "dynamodb",
            endpoint_url=twin.endpoint_url,
            region_name=twin.region,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        self.runs = DynamoBenchmarkStore(twin.table_name, resource)
        self.profiles = DynamoStore(twin.table_name, resource)
        self.records = S3RecordStore(twin.bucket_name, twin.client("s3"))
        self.ecs, self.asg, self.sfn = (twin.client(s) for s in ("ecs", "autoscaling", "stepfunctions"))

    def run(self, name: str, **given: Any) -> ExecutionResult:
        """run_benchmark with the given input (start/stop options filled in) as execution bench-<name>."""
        document = {"start_options": START_OPTIONS, "stop_options": STOP_OPTIONS, **given}
        return self.twin.run("run_benchmark", document, name=f"bench-{name}", timeout_s=240)

    def start(self, profile: str, name: str) -> None:
        """Bring the profile to READY through start_profile."""
        result = self.twin.run("start_profile", {"profile": profile, **START_OPTIONS}, name=f"start-{profile}-{name}")
        assert result.status == "SUCCEEDED", (result.error, result.cause)

    def stop(self, profile: str, name: str) -> None:
        """Stop the profile through stop_profile."""
        result = self.twin.run("stop_profile", {"profile": profile, **STOP_OPTIONS}, name=f"stop-{profile}-{name}")
        assert result.status == "SUCCEEDED", (result.error, result.cause)

    def phase(self, profile: str) -> str:
        """The profile's recorded phase."""
        return self.profiles.get_profile(profile).phase.value

    def running(self, profile: str) -> tuple[int, int]:
        """(service running count, instances in the pool's ASG) as AWS reports them."""
        spec = self.registry.profiles[profile]
        service = self.ecs.describe_services(cluster=spec.cluster, services=[spec.service])["services"][0]
        group = self.asg.describe_auto_scaling_groups(AutoScalingGroupNames=[self.registry.pool_of(profile).asg_name])
        return service["runningCount"], len(group["AutoScalingGroups"][0]["Instances"])

    def generation_tokens(self, profile: str) -> float:
        """The model server's own counter of generated tokens (its /metrics), read through the endpoint."""
        spec = self.registry.profiles[profile]
        text = httpx.get(
            f"{spec.endpoint_url}/metrics", headers={spec.routing_header.name: spec.routing_header.value}, timeout=10
        ).text
        return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("vllm:generation_tokens_total"))

    def wait_for(self, what: str, condition: Callable[[], bool], timeout_s: float = 90.0) -> None:
        """Poll condition until true; fail naming what never happened (a liveness bound, not a timing check)."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                pytest.fail(f"never happened: {what}")
            time.sleep(0.1)


@pytest.fixture(scope="module")
def twin() -> Iterator[Twin]:
    """A twin of the reference registry for the module."""
    with Twin(model_server="sim", time_scale=10.0, delays=Delays().scaled(0.1)) as running:
        yield running


def twin_with_api() -> Twin:
    """A twin that also serves the REST API over HTTP (for a module's own `twin` fixture)."""
    return Twin(model_server="sim", time_scale=10.0, delays=Delays().scaled(0.1), api_port=0)


@pytest.fixture
def cli(twin: Twin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Any:
    """main(argv) -> (exit code, stdout, stderr) against the module's twin (its REST API), found
    through its state file (--local)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("SERVINGCTL_API_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    assert twin.api_url is not None, "the module's twin serves no REST API (twin_with_api)"
    write_twin_state(twin.api_url, POLL)

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main([*argv, "--local"])
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture(scope="module")
def kept(twin: Twin) -> Iterator[set[str]]:
    """Profiles kept READY for the module (see ready_profile); stopped when the module ends."""
    keep: set[str] = set()
    yield keep
    for profile in keep:
        Bench(twin, set()).stop(profile, "module-end")


@pytest.fixture(scope="module")
def ready_profile(twin: Twin, kept: set[str]) -> str:
    """deepseek-v4-flash READY once for the tests that benchmark a running profile."""
    Bench(twin, kept).start("deepseek-v4-flash", "module")
    kept.add("deepseek-v4-flash")
    return "deepseek-v4-flash"


@pytest.fixture
def bench(twin: Twin, kept: set[str]) -> Iterator[Bench]:
    """A Bench of the module's twin; afterwards the world must not have failed, and a profile a
    failed test left running is stopped so the next test starts from nothing running."""
    checker = Bench(twin, kept)
    yield checker
    assert twin.world is not None and twin.world.error is None, twin.world.error
    for profile in checker.registry.profiles:
        if profile in kept and checker.phase(profile) == "READY":
            continue
        if checker.phase(profile) != "STOPPED" or checker.running(profile) != (0, 0):
            checker.stop(profile, f"cleanup-{time.monotonic_ns()}")
