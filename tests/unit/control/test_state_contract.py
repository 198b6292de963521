"""The state machine files agree with the step state models (servingctl.control.state and, for
run_benchmark, servingctl.runs.state): every Task of start_profile and stop_profile writes its
ResultPath with the model its step answers with, its
ResultSelector keeps exactly that model's fields, every ResultPath is a field of the flow's state and
every field of the state is written by some state, and every path the ASL reads names fields that
exist. A field renamed on one side only fails here, not in the middle of a start on AWS."""

from __future__ import annotations

import json
import re
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import pytest
from pydantic import BaseModel

from servingctl.control.state import FlowState, SmokePassed, StartState, StepError, StopState, parse_state
from servingctl.control.steps import ACTIONS
from servingctl.runs.state import ChildExecution, EcsRun, RunState, ScenarioItem, ShardAnswer, ShardItem
from servingctl.runs.worker import ACTIONS as BENCH_ACTIONS

ROOT = Path(__file__).resolve().parents[3]
FLOWS: dict[str, type[FlowState]] = {"start_profile": StartState, "stop_profile": StopState}
# The smoke test runs in its own function (in the VPC): its answer model is not in the step table.
OTHER_ANSWERS: dict[str, type[BaseModel]] = {"smoke_test": SmokePassed}
CAUGHT = {"$.error", "$.rollback_error"}
# Fields of the JSON paths that read the state (ResultSelector reads the step's answer instead).
READERS = ("Variable", "SecondsPath", "ErrorPath", "CausePath", "InputPath", "OutputPath", "ItemsPath")


def load(flow: str) -> dict[str, Any]:
    return json.loads((ROOT / "statemachine" / f"{flow}.asl.json").read_text())


def tasks(flow: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, state in load(flow)["States"].items():
        if state["Type"] == "Task":
            yield name, state


def models_in(annotation: Any) -> list[type[BaseModel]]:
    """The models a field may hold (`X | None` -> [X])."""
    if get_origin(annotation) in (Union, types.UnionType):
        return [m for arg in get_args(annotation) for m in models_in(arg)]
    return [annotation] if isinstance(annotation, type) and issubclass(annotation, BaseModel) else []


def fields(model: type[BaseModel]) -> dict[str, Any]:
    """A model's fields by their JSON name."""
    return {field.alias or name: field.annotation for name, field in model.model_fields.items()}


def answer_of(state: dict[str, Any]) -> type[BaseModel]:
    action = state["Parameters"]["Payload"]["action"]
    return OTHER_ANSWERS.get(action) or ACTIONS[action].answer


def resolve(model: type[BaseModel], path: str) -> None:
    """Walk a JSON path ($.a.b) through the state model; fails naming the first field that is not there."""
    current: list[type[BaseModel]] = [model]
    for part in path.removeprefix("$").strip(".").split("."):
        if not part:
            continue
        found = [fields(m)[part] for m in current if part in fields(m)]
        assert found, f"{path}: no field {part!r} in {', '.join(m.__name__ for m in current)}"
        current = [m for annotation in found for m in models_in(annotation)]
        if not current:
            return  # a plain value or a free-form mapping (a check's marks): the path ends in data


def reads(node: Any) -> Iterator[str]:
    """Every state path ($. ...) a state reads, outside its ResultSelector (which reads the answer)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("ResultSelector", "Catch", "Retry", "ResultPath"):
                continue
            if isinstance(value, str) and (key.endswith(".$") or key in READERS) and value.startswith("$."):
                yield value
            else:
                yield from reads(value)
    elif isinstance(node, list):
        for item in node:
            yield from reads(item)


@pytest.mark.parametrize("flow", FLOWS)
def test_every_task_writes_its_result_path_with_the_model_its_step_answers_with(flow: str) -> None:
    state_fields = fields(FLOWS[flow])
    for name, task in tasks(flow):
        key = task["ResultPath"].removeprefix("$.")
        answer = answer_of(task)
        assert key in state_fields, f"{name}: {task['ResultPath']} is no field of {FLOWS[flow].__name__}"
        assert answer in models_in(state_fields[key]), f"{name}: $.{key} holds {state_fields[key]}, the step answers {answer}"
        kept = {selected.removesuffix(".$"): path for selected, path in task["ResultSelector"].items()}
        assert kept == {field: f"$.Payload.{field}" for field in fields(answer)}, name


@pytest.mark.parametrize("flow", FLOWS)
def test_each_step_reads_the_state_of_its_flow(flow: str) -> None:
    for name, task in tasks(flow):
        action = task["Parameters"]["Payload"]["action"]
        if action in ACTIONS:
            assert ACTIONS[action].state in (FLOWS[flow], FlowState), name


@pytest.mark.parametrize("flow", FLOWS)
def test_every_field_of_the_state_is_written_by_the_flow_and_every_catch_by_an_error_field(flow: str) -> None:
    definition = load(flow)
    written = {t["ResultPath"] for _, t in tasks(flow)}
    caught = {c["ResultPath"] for s in definition["States"].values() for c in s.get("Catch", [])}
    assert caught == CAUGHT
    assert all(models_in(fields(FLOWS[flow])[path.removeprefix("$.")]) == [StepError] for path in caught)
    assert {f"$.{field}" for field in fields(FLOWS[flow])} == written | caught


@pytest.mark.parametrize("flow", FLOWS)
def test_every_path_the_flow_reads_names_fields_of_the_state(flow: str) -> None:
    paths = set(reads(load(flow)["States"]))
    assert paths
    for path in paths:
        resolve(FLOWS[flow], path)


def test_a_path_to_a_field_no_model_has_fails() -> None:
    resolve(StartState, "$.capacity.progress.marks.ready_at")
    with pytest.raises(AssertionError, match="no field 'readdy'"):
        resolve(StartState, "$.capacity.readdy")
    with pytest.raises(AssertionError, match="no field 'lock'"):
        resolve(StartState, "$.config.lock")


SAMPLES = sorted((ROOT / "events" / "profile_steps").glob("*.json")) + sorted((ROOT / "events" / "smoke_test").glob("*.json"))


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_the_sample_events_states_validate_as_their_steps_models(path: Path) -> None:
    event = json.loads(path.read_text())
    action = ACTIONS.get(event["action"])
    parsed = action.parse(event["state"]) if action else parse_state(StartState, event["state"])
    # Nothing the sample carries is dropped on the way in, but the execution input's own fields.
    assert set(event["state"]) - set(parsed.given()) <= set(fields(type(parsed)))
    assert re.match(r"^arn:aws:states:", event["execution"])


# ---- run_benchmark: the run's state, a scenario's (RunScenarios items) and a shard's (RunShards items)
BENCH_STATES: dict[str, type[BaseModel]] = {"": RunState, "RunScenarios": ScenarioItem, "RunShards": ShardItem}
# What a service integration answers (no Payload): its task's output model.
SERVICE_ANSWERS = {"arn:aws:states:::states:startExecution.sync:2": ChildExecution, "arn:aws:states:::ecs:runTask.sync": EcsRun}


def bench_states() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(the Map a state runs in, "" at the top; its name; the state) for every state of run_benchmark."""

    def walk(states: dict[str, Any], within: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
        for name, state in states.items():
            yield within, name, state
            if state["Type"] == "Map":
                yield from walk(state["ItemProcessor"]["States"], name)

    yield from walk(load("run_benchmark")["States"], "")


def kept_model(state_model: type[BaseModel], result_path: str, selected: set[str]) -> type[BaseModel]:
    """The model the state keeps at result_path: the one its field may hold with exactly the selected fields."""
    # RunShard's answer becomes the shard's whole state ($).
    candidates = [ShardAnswer] if result_path == "$" else models_in(fields(state_model)[result_path.removeprefix("$.")])
    matching = [m for m in candidates if set(fields(m)) == selected]
    assert len(matching) == 1, f"{result_path}: kept {sorted(selected)}; the state's models: {candidates}"
    return matching[0]


def test_every_run_benchmark_task_keeps_fields_its_step_answers_in_a_model_of_its_result_path() -> None:
    tasks_seen = 0
    for within, name, task in bench_states():
        if task["Type"] != "Task":
            continue
        tasks_seen += 1
        state_model = BENCH_STATES[within]
        result_path = task["ResultPath"]
        assert result_path == "$" or result_path.removeprefix("$.") in fields(state_model), f"{name}: {result_path}"
        selector = {key.removesuffix(".$"): path for key, path in task["ResultSelector"].items()}
        kept = kept_model(state_model, result_path, set(selector))
        if task["Resource"] == "arn:aws:states:::lambda:invoke":
            action = task["Parameters"]["Payload"]["action"]
            # A field the flow keeps is one the step answers with, read from its Payload.
            assert selector == {f: f"$.Payload.{f}" for f in selector}, name
            assert set(fields(kept)) <= set(fields(BENCH_ACTIONS[action].answer)), name
        else:
            assert kept is SERVICE_ANSWERS[task["Resource"]], name
    assert tasks_seen == 15


def test_every_run_benchmark_step_gets_the_state_its_model_reads() -> None:
    for within, name, task in bench_states():
        payload = task.get("Parameters", {}).get("Payload")
        if task["Type"] != "Task" or payload is None:
            continue
        step = BENCH_ACTIONS[payload["action"]].state
        context = BENCH_STATES[within]
        if payload.get("state.$") == "$":
            # The whole state: every field the step requires is one the state has.
            required = {n for n, f in step.model_fields.items() if f.is_required()}
            assert required <= set(fields(context)), f"{name}: {step.__name__} needs {required - set(fields(context))}"
        else:
            built = {key.removesuffix(".$"): path for key, path in payload["state"].items()}
            assert set(built) <= set(fields(step)) and {n for n, f in step.model_fields.items() if f.is_required()} <= set(built)
            for path in built.values():
                resolve(context, path)


def test_every_path_run_benchmark_reads_names_fields_of_its_state() -> None:
    paths = 0
    for within, name, state in bench_states():
        if state["Type"] == "Map":  # its ItemSelector reads the state it runs in; its items are checked as their own
            item = BENCH_STATES[name]
            selected = (
                {key.removesuffix(".$"): path for key, path in state["ItemSelector"].items()} if "ItemSelector" in state else {}
            )
            assert set(selected) <= set(fields(item)), name
            for path in [state["ItemsPath"], *(p for p in selected.values() if p.startswith("$."))]:
                resolve(BENCH_STATES[within], path)
                paths += 1
            continue
        shallow = {k: v for k, v in state.items() if k not in ("ItemProcessor", "ResultSelector", "Catch", "Retry")}
        found = set(reads(shallow)) | {p for text in intrinsic_args(shallow) for p in re.findall(r"\$\.[\w.]+", text)}
        for path in found:
            resolve(BENCH_STATES[within], path)
            paths += 1
    assert paths > 30


def intrinsic_args(node: Any) -> Iterator[str]:
    """The paths intrinsic functions read (States.JsonToString($.event))."""
    if isinstance(node, dict):
        for value in node.values():
            yield from intrinsic_args(value)
    elif isinstance(node, list):
        for value in node:
            yield from intrinsic_args(value)
    elif isinstance(node, str) and node.startswith("States."):
        yield node


def test_every_field_of_run_benchmarks_states_is_written_by_the_flow() -> None:
    written: dict[str, set[str]] = {within: set() for within in BENCH_STATES}
    for within, name, state in bench_states():
        for path in [state.get("ResultPath"), *(c["ResultPath"] for c in state.get("Catch", []))]:
            if path and path != "$":
                written[within].add(path.removeprefix("$."))
        if state["Type"] == "Map" and "ItemSelector" in state:
            written[name] |= {key.removesuffix(".$") for key in state["ItemSelector"]}
    written["RunShards"] |= set(fields(ShardItem))  # its items are ScenarioKept.shards, whole
    for within, model in BENCH_STATES.items():
        assert written[within] == set(fields(model)), within


@pytest.mark.parametrize("path", sorted((ROOT / "events" / "bench_worker").glob("*.json")), ids=lambda p: p.stem)
def test_the_bench_worker_samples_validate_as_their_steps_models(path: Path) -> None:
    event = json.loads(path.read_text())
    parse_state(BENCH_ACTIONS[event["action"]].state, event["state"])
