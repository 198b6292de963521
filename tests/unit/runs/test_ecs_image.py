"""The benchmark task image recipe (infra/bench/Dockerfile) matches the repository: what it copies
exists, it installs the Lambda layer's pinned requirements with their constraints, and its entry
point is the worker module the task definition expects."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from cfnlint.decode import decode

from servingctl.runs import worker
from servingctl.shared.environment import BenchTaskSettings, BenchWorkerSettings

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = (ROOT / "infra/bench/Dockerfile").read_text()


def _instructions(keyword: str) -> list[str]:
    return [line.split(None, 1)[1] for line in DOCKERFILE.splitlines() if line.startswith(keyword + " ")]


def test_every_copied_path_exists_and_keeps_the_requirements_constraints_layout() -> None:
    copies = [shlex.split(args) for args in _instructions("COPY")]
    assert copies and all((ROOT / source).exists() for *sources, _ in copies for source in sources)
    destinations = dict(copies)
    requirements = destinations["layers/core/requirements.txt"]
    constraint = next(
        line.split()[1] for line in (ROOT / "layers/core/requirements.txt").read_text().splitlines() if line.startswith("-c ")
    )
    assert (Path(requirements).parent / constraint).resolve() == Path(destinations["constraints.txt"])
    assert any(requirements in run for run in _instructions("RUN"))


def test_the_entry_point_is_the_worker_module_and_it_reads_the_event_the_machine_sets() -> None:
    entrypoint = json.loads(_instructions("ENTRYPOINT")[0])
    assert entrypoint == ["python", "-m", worker.__name__] and callable(worker.main)
    definition = (ROOT / "statemachine/run_benchmark.asl.json").read_text()
    assert re.search(rf'"Name": "{BenchTaskSettings.model_fields["event"].alias}"', definition)
    assert not _instructions("USER")[0].startswith("0") and "root" not in _instructions("USER")[0]


def test_the_task_definition_runs_this_image_with_the_workers_environment() -> None:
    template = decode(str(ROOT / "template.yaml"))[0]
    task = template["Resources"]["BenchTaskDefinition"]
    [container] = task["Properties"]["ContainerDefinitions"]
    assert task["Condition"] == "HasBenchImage" and container["Image"] == {"Ref": "BenchImageUri"}
    names = {variable["Name"] for variable in container["Environment"]}
    # Every variable the worker's settings require, but the region (ECS sets AWS_REGION itself).
    required = {f.alias for f in BenchWorkerSettings.model_fields.values() if f.is_required()} - {"AWS_REGION"}
    assert {"SERVINGCTL_REGISTRY", "SERVINGCTL_TABLE", "SERVINGCTL_BUCKET"} <= required <= names
    assert container["ReadonlyRootFilesystem"] is True
    # the state machine overrides the environment of the container the worker names
    assert container["Name"] == worker.EcsTarget("c", "td", [], []).container
    assert task["Properties"]["Family"] == {"Fn::Sub": "${AWS::StackName}-bench"}
