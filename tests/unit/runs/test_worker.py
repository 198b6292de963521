"""The benchmark worker's actions on in-memory stores and the reference registry, against an
OpenAI-compatible fake (no /metrics, no /tokenize): planning and its refusals, the reproducibility
record, a scenario written as soon as it finishes, the split plan, comparisons and the final status."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from servingctl.control.executions import is_execution_of
from servingctl.costs import CompareInput, compare, load_catalog
from servingctl.loadgen.calibration import UNIT
from servingctl.registry.loader import parse_registry
from servingctl.runs import worker as bench_worker
from servingctl.runs.worker import (
    EcsTarget,
    ProfileNotReady,
    RunNotFound,
    WorkerDeps,
    compare_run,
    new_run_id,
    run_action,
)
from servingctl.shared.errors import InvalidInput, ProfileNotFound
from servingctl.store import MemoryStore, Phase
from servingctl.store.benchmarks import ResultExists, RunEnded, RunStatus
from servingctl.store.benchmarks_memory import MemoryBenchmarkStore
from servingctl.store.records import MemoryRecordStore, records_key

ROOT = Path(__file__).resolve().parents[3]
REGISTRY = parse_registry((ROOT / "twin/servingctl_twin/reference_registry.json").read_text())
EXECUTION = "arn:aws:states:us-east-1:123456789012:execution:servingctl-run-benchmark:bench-1"
STARTED = "2026-12-02T10:00:00.000Z"
T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
ENTERED = "2026-12-02T10:00:01.250Z"  # $$.State.EnteredTime of the scenario steps


class FixedClock:
    """A clock that stands still (the steps only read it)."""

    def now(self) -> datetime:
        return T0

    def sleep(self, seconds: float) -> None:
        """Never called by the worker."""


def fake_server() -> tuple[httpx.MockTransport, list[dict]]:
    """Streams max_tokens one-token chunks; prompt tokens = 3 + 9 per unit sentence; no /metrics."""
    seen: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path != "/v1/chat/completions":
            return httpx.Response(404, json={"error": "not found"})
        body = json.loads(request.content)
        seen.append({"headers": dict(request.headers), "body": body})
        prompt = 3 + 9 * body["messages"][0]["content"].count(UNIT)
        if not body["stream"]:
            return httpx.Response(200, json={"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": 1}})
        return streamed(body["max_tokens"], prompt)

    return httpx.MockTransport(handler), seen


def streamed(n: int, prompt: int) -> httpx.Response:
    """An SSE answer of n one-token chunks, then the usage (prompt tokens as given) and [DONE]."""
    events = [{"choices": [{"delta": {"content": "x"}, "finish_reason": "length" if i == n - 1 else None}]} for i in range(n)]
    events.append({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": n}})
    lines = [f"data: {json.dumps(e)}\n\n".encode() for e in events] + [b"data: [DONE]\n\n"]

    async def stream():
        for line in lines:
            yield line

    return httpx.Response(200, content=stream(), headers={"content-type": "text/event-stream"})


@pytest.fixture
def deps() -> WorkerDeps:
    transport, _ = fake_server()
    return WorkerDeps(
        registry=REGISTRY,
        runs=MemoryBenchmarkStore(),
        records=MemoryRecordStore(),
        profiles=MemoryStore(),
        clock=FixedClock(),
        transport=transport,
    )


def _ready(deps: WorkerDeps, profile: str) -> None:
    deps.profiles.set_phase(profile, Phase.STARTING, T0, "arn:start")
    deps.profiles.set_phase(profile, Phase.READY, T0, "arn:start")


def _plan(deps: WorkerDeps, execution: str = EXECUTION, **given) -> dict:
    event = {"action": "plan", "state": {"profile": "deepseek-v4-flash", **given}, "execution": execution, "started_at": STARTED}
    return run_action(event, deps)


SMALL = {"input_tokens": [100], "concurrencies": [1, 2], "warmup": 0, "rounds": 2, "max_tokens": 4}


def test_a_profile_that_is_not_ready_is_refused_unless_start_is_asked(deps: WorkerDeps) -> None:
    with pytest.raises(ProfileNotReady, match='profile deepseek-v4-flash is STOPPED, not READY; pass "start": true'):
        _plan(deps)
    assert deps.runs.list_runs() == []  # nothing recorded for a refused run
    plan = _plan(deps, start=True, stop=True)
    assert (plan["phase"], plan["ready"], plan["start"], plan["stop"]) == ("STOPPED", False, True, True)
    _ready(deps, "deepseek-v4-flash")
    ready = _plan(deps, "arn:aws:states:us-east-1:123456789012:execution:servingctl-run-benchmark:bench-2", start=True)
    assert (ready["ready"], ready["start"]) == (True, False)  # already READY: nothing to start


def test_unknown_profile_and_bad_flow_options_name_the_field(deps: WorkerDeps) -> None:
    with pytest.raises(ProfileNotFound, match="known profiles: deepseek-v4-flash, nemotron-nano"):
        run_action({"action": "plan", "state": {"profile": "nope"}, "execution": EXECUTION}, deps)
    with pytest.raises(InvalidInput, match=r"start_options: poll.interval_s: Input should be greater than or equal to 1"):
        _plan(deps, start=True, start_options={"poll": {"interval_s": 0}})
    allowed = "deadlines, no_wake, poll, profile"
    with pytest.raises(InvalidInput, match=f"stop_options: deadline: unknown field; allowed fields: {allowed}"):
        _plan(deps, start=True, stop_options={"deadline": {}})


def test_plan_records_the_run_with_its_reproducibility_record(deps: WorkerDeps) -> None:
    plan = _plan(deps, start=True, stop=True, label="MTP on", **SMALL)
    assert plan["run_id"] == new_run_id(datetime.fromisoformat(STARTED), EXECUTION) and plan["run_id"].startswith(
        "20261202T100000Z-"
    )
    assert [s["name"] for s in plan["scenarios"]] == ["in100-c1", "in100-c2"] and plan["ecs"] is None
    # The run's own start and stop are found as this profile's by the API and the sweep (80 characters at most).
    start_name, stop_name = plan["start_execution"]["name"], plan["stop_execution"]["name"]
    assert is_execution_of(start_name, "start", "deepseek-v4-flash") and is_execution_of(stop_name, "stop", "deepseek-v4-flash")
    assert len(start_name) <= 80 and plan["run_id"] not in start_name
    assert plan["start_execution"]["input"]["profile"] == "deepseek-v4-flash"
    assert plan["start_execution"]["input"]["lease_minutes"] == 120  # the profile's default covers this short run
    run = deps.runs.get_run(plan["run_id"])
    assert run.status == RunStatus.PLANNED and run.execution == EXECUTION and run.label == "MTP on"
    assert run.scenarios == ["in100-c1", "in100-c2"] and run.config.headers == {"X-LLM-Profile": "deepseek-v4-flash"}
    repro = run.reproducibility
    serving = REGISTRY.profiles["deepseek-v4-flash"].serving
    assert (repro.model_id, repro.revision, repro.vllm_version) == ("nvidia/DeepSeek-V4-Flash-NVFP4", serving.revision, "0.26.0")
    assert repro.revision == "48bfe38c62be14e8d82f9e3be12fe5d30a2e38c8"
    assert (repro.instance_type, repro.gpu_count, repro.pool, repro.region) == ("g7e.12xlarge", 2, "g7e-2gpu", "us-east-1")
    assert repro.serving == serving.model_dump(mode="json") and repro.serving["speculative_tokens"] == 1
    assert (repro.seed, repro.salt_mode, repro.engine, repro.results_schema_version) == (42, "cache-salt", "servingctl", 1)


def test_plan_is_idempotent_for_its_execution_and_refuses_a_taken_run_id(deps: WorkerDeps) -> None:
    first = _plan(deps, start=True, **SMALL)
    assert _plan(deps, start=True, **SMALL) == first  # a Lambda retry plans the same run
    assert len(deps.runs.list_runs()) == 1
    mine = _plan(deps, start=True, run_id="20261202T100000Z-mine", **SMALL)
    assert mine["run_id"] == "20261202T100000Z-mine"
    with pytest.raises(InvalidInput, match="run_id: 20261202T100000Z-mine already belongs to execution"):
        _plan(
            deps,
            "arn:aws:states:us-east-1:123456789012:execution:servingctl-run-benchmark:other",
            start=True,
            run_id="20261202T100000Z-mine",
            **SMALL,
        )


def test_plan_hands_the_ecs_task_to_the_state_machine_when_deployed(deps: WorkerDeps) -> None:
    deps.ecs = EcsTarget(cluster="arn:cluster", task_definition="arn:td", subnets=["s1", "s2"], security_groups=["sg"])
    plan = _plan(deps, start=True, input_tokens=[256, 8192], concurrencies=[4], rounds=20)
    assert [s["runner"] for s in plan["scenarios"]] == ["lambda", "ecs"]
    assert plan["ecs"] == {
        "cluster": "arn:cluster",
        "task_definition": "arn:td",
        "subnets": ["s1", "s2"],
        "security_groups": ["sg"],
        "container": "bench",
    }


def _measured_run(deps: WorkerDeps, **given) -> dict:
    _ready(deps, "deepseek-v4-flash")
    plan = _plan(deps, **{**SMALL, **given})
    state = {"profile": "deepseek-v4-flash", "plan": plan}
    run_action({"action": "calibrate", "state": state, "execution": EXECUTION}, deps)
    answers = [run_action(_scenario_event(plan, s), deps) for s in plan["scenarios"]]
    return {"plan": plan, "state": state, "answers": answers}


def _scenario_event(plan: dict, scenario: dict, retry: int = 0) -> dict:
    """run_scenario as the state machine sends it, with the attempt's context ($$.State)."""
    return {
        "action": "run_scenario",
        "state": {"run_id": plan["run_id"], "scenario": scenario},
        "execution": EXECUTION,
        "attempt": {"entered": ENTERED, "retry": retry},
    }


def test_calibrate_then_each_scenario_is_stored_with_its_records(deps: WorkerDeps) -> None:
    transport, seen = fake_server()
    deps.transport = transport
    done = _measured_run(deps)
    run_id = done["plan"]["run_id"]
    run = deps.runs.get_run(run_id)
    assert run.status == RunStatus.RUNNING and run.metadata is not None
    [calibration] = run.reproducibility.calibrations
    assert (calibration.target_tokens, calibration.method) == (100, "usage")
    assert all(r["headers"]["x-llm-profile"] == "deepseek-v4-flash" for r in seen)  # the ALB routes on it
    stored = deps.runs.list_scenarios(run_id)
    assert [s.name for s in stored] == ["in100-c1", "in100-c2"] and [s.records for s in stored] == [2, 4]
    assert stored[1].records_key == records_key(run_id, "in100-c2", attempt="t20261202100001250-r0")
    assert [r.completion_tokens for r in deps.records.get_records(stored[1].records_key)] == [4, 4, 4, 4]
    c1, c2 = done["answers"]
    assert c1["split"] is False  # one request in flight is never split
    assert c2["split"] == c2["client_bound"] and c2["ok"] == 4  # split exactly when the client was the limit


def test_a_client_bound_scenario_answers_with_its_shards(deps: WorkerDeps) -> None:
    done = _measured_run(deps, concurrencies=[3], client_cpu_limit=0.0, max_workers=2)
    [answer] = done["answers"]
    assert answer["client_bound"] and answer["split"]
    shards = [s["shard"] for s in answer["shards"]]
    assert [(s["index"], s["count"], s["concurrency"]) for s in shards] == [(0, 2, 2), (1, 2, 1)]
    assert len({s["start_at"] for s in shards}) == 1
    assert all(s["run_id"] == done["plan"]["run_id"] and s["scenario"]["name"] == "in100-c3" for s in answer["shards"])


def test_compare_uses_the_pool_instance_price_from_the_catalog(deps: WorkerDeps) -> None:
    done = _measured_run(deps)
    run = deps.runs.get_run(done["plan"]["run_id"])
    answer = run_action({"action": "compare", "state": done["state"], "execution": EXECUTION}, deps)
    assert [c["scenario"] for c in answer["compared"]] == ["in100-c1", "in100-c2"] and answer["skipped"] is None
    catalog = load_catalog()
    price = catalog.instance("us-east-1", "g7e.12xlarge")
    api = catalog.managed_api()
    for stored, scenario in zip(deps.runs.list_comparisons(run.run_id), deps.runs.list_scenarios(run.run_id), strict=True):
        summary = scenario.summary
        expected = compare(
            CompareInput(
                output_tok_s=summary.output_tok_s,
                input_tokens=summary.input_tokens,
                output_tokens=4,
                api_input_usd_per_m=api.input_usd_per_m,
                api_output_usd_per_m=api.output_usd_per_m,
                hourly_usd=price.hourly_usd,
            )
        )
        assert stored.comparison == expected and stored.hourly_usd == 12.17 and stored.instance_type == "g7e.12xlarge"
        assert stored.api == "fireworks/deepseek-v4-flash"


def test_compare_is_skipped_with_a_reason_when_the_catalog_has_no_price(deps: WorkerDeps) -> None:
    catalog = load_catalog()
    deps.catalog = lambda: catalog.model_copy(
        update={"instances": {k: v for k, v in catalog.instances.items() if k != "us-east-1/g7e.2xlarge"}}
    )
    _ready(deps, "nemotron-nano")
    plan = run_action({"action": "plan", "state": {"profile": "nemotron-nano", **SMALL}, "execution": EXECUTION}, deps)
    run = deps.runs.get_run(plan["run_id"])
    assert compare_run(deps, run) == {
        "compared": [],
        "skipped": "the price catalog has no on-demand price for us-east-1/g7e.2xlarge",
    }


def test_an_unknown_managed_api_is_named(deps: WorkerDeps) -> None:
    done = _measured_run(deps, managed_api="acme/llm")
    with pytest.raises(
        InvalidInput, match="managed_api: unknown managed API 'acme/llm'; allowed values: fireworks/deepseek-v4-flash"
    ):
        run_action({"action": "compare", "state": done["state"], "execution": EXECUTION}, deps)


def test_a_failed_run_keeps_what_was_written_and_says_why(deps: WorkerDeps) -> None:
    done = _measured_run(deps)
    error = {"Error": "KeyError", "Cause": json.dumps({"errorMessage": "'attachments'", "errorType": "KeyError"})}
    answer = run_action(
        {"action": "finish", "outcome": "FAILED", "state": done["state"] | {"error": error}, "execution": EXECUTION}, deps
    )
    assert answer["status"] == "FAILED" and answer["scenarios_written"] == ["in100-c1", "in100-c2"]
    run = deps.runs.get_run(done["plan"]["run_id"])
    assert run.status == RunStatus.FAILED and run.error == "KeyError: 'attachments'" and run.finished_at == T0
    assert len(deps.runs.list_comparisons(run.run_id)) == 2  # what was measured is still compared


def test_success_is_recorded(deps: WorkerDeps) -> None:
    done = _measured_run(deps)
    answer = run_action({"action": "finish", "state": done["state"], "execution": EXECUTION}, deps)
    assert answer == {
        "run_id": done["plan"]["run_id"],
        "status": "SUCCEEDED",
        "scenarios_written": ["in100-c1", "in100-c2"],
        "error": None,
    }


def _unavailable_server() -> httpx.MockTransport:
    """Calibrates (non-streamed probes answer) but refuses every streamed request with a 503."""
    transport, _ = fake_server()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.content and json.loads(request.content).get("stream"):
            return httpx.Response(503, json={"error": "no healthy upstream"})
        return transport.handler(request)

    return httpx.MockTransport(handler)


def test_a_run_whose_requests_all_failed_ends_failed_and_says_why(deps: WorkerDeps) -> None:
    deps.transport = _unavailable_server()
    done = _measured_run(deps)
    answer = run_action({"action": "finish", "state": done["state"], "execution": EXECUTION}, deps)
    assert answer["status"] == "FAILED"
    run = deps.runs.get_run(done["plan"]["run_id"])
    assert run.status == RunStatus.FAILED and run.error == (
        "requests failed past max_failure_rate 0: "
        'in100-c1: 2 of 2 failed (100.0%): http_status 2 (e.g. HTTP 503: {"error":"no healthy upstream"}); '
        'in100-c2: 4 of 4 failed (100.0%): http_status 4 (e.g. HTTP 503: {"error":"no healthy upstream"})'
    )


def test_failures_up_to_the_allowed_rate_still_succeed(deps: WorkerDeps) -> None:
    deps.transport = _unavailable_server()
    done = _measured_run(deps, max_failure_rate=1.0)  # every request failed: at the limit, not past it
    answer = run_action({"action": "finish", "state": done["state"], "execution": EXECUTION}, deps)
    assert answer["status"] == "SUCCEEDED"


def test_unknown_action_and_missing_run_are_named(deps: WorkerDeps) -> None:
    with pytest.raises(InvalidInput, match="action: unknown 'bench'; allowed: plan, calibrate, run_scenario, run_shard"):
        run_action({"action": "bench", "state": {}}, deps)
    sample = json.loads((ROOT / "events/bench_worker/calibrate.json").read_text())
    state = sample["state"] | {"plan": sample["state"]["plan"] | {"run_id": "nope"}}
    with pytest.raises(Exception, match="run_id: no benchmark run 'nope' in the store"):
        run_action({"action": "calibrate", "state": state, "execution": EXECUTION}, deps)
    # A state that is not the flow's is refused before anything runs, naming each field it lacks.
    with pytest.raises(InvalidInput, match=r"invalid input: plan.profile: required; plan.phase: required"):
        run_action({"action": "calibrate", "state": {"plan": {"run_id": "nope"}}, "execution": EXECUTION}, deps)


def test_a_shard_waits_for_the_common_start_and_numbers_its_requests_apart() -> None:
    import asyncio
    from datetime import timedelta

    from servingctl.loadgen.backend import Connection
    from servingctl.loadgen.measure import INDEX_STRIDE, Shard, measure_scenario
    from servingctl.schema.results import Calibration, RunConfig

    transport, seen = fake_server()
    config = RunConfig(endpoint="http://alb.internal", model="m", warmup=0, rounds=2, max_tokens=3)
    calibration = Calibration(target_tokens=100, actual_tokens=93, repetitions=10, method="usage", unit=UNIT)
    start_at = datetime.now(UTC) + timedelta(milliseconds=300)

    def shard(index: int, at: datetime):
        return asyncio.run(
            measure_scenario(
                config,
                Connection(config.endpoint),
                calibration,
                2,
                run_id="r1",
                name="in100-c4",
                shard=Shard(index, 2, at),
                transport=transport,
            )
        )

    on_time = shard(1, start_at)
    assert on_time.t0_wall >= start_at and on_time.late_start_s == 0.0  # nothing was sent before the common start
    assert on_time.name == "in100-c4" and on_time.concurrency == 2
    assert [r.index for r in on_time.records] == [2 * INDEX_STRIDE + i for i in range(4)]
    late = shard(0, datetime.now(UTC) - timedelta(seconds=2))
    assert late.late_start_s >= 2.0 and [r.index for r in late.records] == [INDEX_STRIDE + i for i in range(4)]
    salts = [s["body"]["cache_salt"] for s in seen]
    assert len(salts) == len(set(salts)) == 8  # no salt repeats across the shards


@pytest.fixture
def never_saturated(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake answers at once: on a busy machine its timings may look like queueing, and
    saturation is tested on its own (tests/unit/loadgen/test_sweep.py): here only the bounds count."""
    monkeypatch.setattr("servingctl.loadgen.saturation.SATURATION_TTFT_RISE", float("inf"))
    monkeypatch.setattr("servingctl.loadgen.saturation.GOODPUT_DROP", 0.0)


def _sweep_loop(deps: WorkerDeps, **given) -> tuple[dict, list[dict]]:
    """Plan, calibrate, then SweepNext / RunSweepScenario as run_benchmark loops them, until no next."""
    _ready(deps, "deepseek-v4-flash")
    plan = _plan(deps, **{**SMALL, "concurrencies": [1], "sweep": True, **given})
    state = {"profile": "deepseek-v4-flash", "plan": plan}
    run_action({"action": "calibrate", "state": state, "execution": EXECUTION}, deps)
    answers = []
    while True:
        answer = run_action({"action": "sweep_next", "state": state, "execution": EXECUTION}, deps)
        answers.append(answer)
        if answer["next"] is None:
            return plan, answers
        run_action(
            {
                "action": "run_scenario",
                "state": {"run_id": plan["run_id"], "scenario": answer["scenario"]},
                "execution": EXECUTION,
            },
            deps,
        )


@pytest.mark.usefixtures("never_saturated")
def test_sweep_next_doubles_to_the_bound_and_records_the_stop(deps: WorkerDeps) -> None:
    plan, answers = _sweep_loop(deps, slos=[{"metric": "e2e_s", "limit": 600}], sweep_max_concurrency=3)
    assert plan["scenarios"] == [] and plan["sweep"] is True  # no matrix: the steps come from sweep_next
    assert [a["next"] for a in answers] == [1, 2, 3, None]  # the bound itself is tried, never passed
    assert [a["scenario"]["position"] for a in answers[:-1]] == [0, 1, 2]
    assert answers[-1] | {"reason": ""} == {
        "next": None,
        "scenario": None,
        "found": 3,
        "stop": "max-concurrency",
        "reason": "",
        "steps": 3,
    }
    run = deps.runs.get_run(plan["run_id"])
    assert run.scenarios == ["in100-c1", "in100-c2", "in100-c3"] and run.sweep.found == 3
    assert [s.summary.slo.met for s in deps.runs.list_scenarios(plan["run_id"])] == [True, True, True]


@pytest.mark.usefixtures("never_saturated")
def test_sweep_next_stops_at_the_step_budget(deps: WorkerDeps) -> None:
    _, answers = _sweep_loop(deps, slos=[{"metric": "e2e_s", "limit": 600}], sweep_max_concurrency=64, sweep_max_steps=2)
    assert [a["next"] for a in answers] == [1, 2, None] and answers[-1]["stop"] == "max-steps"


def test_sweep_input_errors_name_the_field(deps: WorkerDeps) -> None:
    _ready(deps, "deepseek-v4-flash")
    with pytest.raises(InvalidInput, match="slos: the sweep searches the highest concurrency meeting an SLO"):
        _plan(deps, **SMALL, sweep=True)
    with pytest.raises(InvalidInput, match=r"sweep_max_concurrency: Input should be less than or equal to 256"):
        _plan(deps, **SMALL, sweep=True, slos=[{"metric": "ttft_ms", "limit": 1}], sweep_max_concurrency=257)
    with pytest.raises(InvalidInput, match=r"slos.0.metric: Input should be 'ttft_ms', 'itl_ms' or 'e2e_s'"):
        _plan(deps, **SMALL, slos=[{"metric": "ttft", "limit": 1}])
    with pytest.raises(InvalidInput, match=r"sweep_max_concurrency 256: about .* more than the 780 s a Lambda worker"):
        _plan(
            deps, **{**SMALL, "max_tokens": 4000}, sweep=True, slos=[{"metric": "ttft_ms", "limit": 1}], sweep_max_concurrency=256
        )
    plan = _plan(deps, **SMALL)
    with pytest.raises(InvalidInput, match=r"sweep: run .* was not asked to sweep"):
        run_action({"action": "sweep_next", "state": {"plan": plan}, "execution": EXECUTION}, deps)


def test_a_retried_attempt_writes_its_own_records_key() -> None:
    assert bench_worker.attempt_of({"attempt": {"entered": ENTERED, "retry": 2}}) == "t20261202100001250-r2"
    assert bench_worker.attempt_of({"attempt": {"entered": "2026-12-02T10:05:00.000Z", "retry": 0}}) == "t20261202100500000-r0"
    assert bench_worker.attempt_of({}) == "t0-r0"  # a hand-made event


def test_a_scenario_already_written_is_answered_from_the_store_not_measured_again(deps: WorkerDeps) -> None:
    transport, seen = fake_server()
    deps.transport = transport
    done = _measured_run(deps)
    plan, first = done["plan"], done["answers"][0]
    sent = len(seen)
    again = run_action(
        _scenario_event(plan, plan["scenarios"][0], retry=1), deps
    )  # the response was lost: Step Functions retried
    assert again == first and len(seen) == sent
    [stored, _] = deps.runs.list_scenarios(plan["run_id"])
    assert stored.records_key.endswith(".t20261202100001250-r0.jsonl.gz")


def test_a_duplicate_workers_write_is_refused_logged_and_the_first_result_stays(
    deps: WorkerDeps, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = _measured_run(deps, concurrencies=[1])
    plan = done["plan"]
    [first] = deps.runs.list_scenarios(plan["run_id"])
    # The second worker looked before the first one wrote (both were measuring at once).
    real = deps.runs.get_scenario
    looks = {"n": 0}

    def racing(run_id: str, name: str):
        looks["n"] += 1
        return None if looks["n"] == 1 else real(run_id, name)

    monkeypatch.setattr(deps.runs, "get_scenario", racing)
    with caplog.at_level("WARNING", logger="servingctl.runs.worker"):
        answer = run_action(_scenario_event(plan, plan["scenarios"][0], retry=1), deps)
    assert answer == done["answers"][0]  # the first result's answer
    assert deps.runs.list_scenarios(plan["run_id"]) == [first]
    assert any("in100-c1 was refused (ResultExists" in r.getMessage() for r in caplog.records)
    # its own records went under its own attempt's key; the first attempt's object is untouched
    assert len(deps.records.get_records(first.records_key)) == first.records
    assert sorted(deps.records.objects) == [
        records_key(plan["run_id"], "in100-c1", attempt=f"t20261202100001250-r{n}") for n in (0, 1)
    ]


def test_a_run_that_ends_mid_measurement_cancels_it_and_nothing_is_written(
    deps: WorkerDeps, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    _ready(deps, "deepseek-v4-flash")
    plan = _plan(deps, **SMALL)
    run_action({"action": "calibrate", "state": {"plan": plan}, "execution": EXECUTION}, deps)
    cancelled = []

    async def aborted_meanwhile(*args, **kwargs):
        # the execution is aborted and the sweep records it while this worker measures
        deps.runs.update_run(plan["run_id"], T0, status=RunStatus.FAILED, error="execution ABORTED")
        deps.profiles.update_profile(plan["profile"], T0, held_by=None, held_until=None)
        try:
            await asyncio.sleep(3600)
        finally:
            cancelled.append(True)

    monkeypatch.setattr(bench_worker, "RUN_WATCH_S", 0.01)
    monkeypatch.setattr(bench_worker, "measure_scenario", aborted_meanwhile)
    with pytest.raises(RunEnded, match="is FAILED, not RUNNING: nothing written"):
        run_action(_scenario_event(plan, plan["scenarios"][0]), deps)
    assert cancelled == [True]
    assert deps.runs.list_scenarios(plan["run_id"]) == [] and deps.records.objects == {}
    assert deps.profiles.get_profile(plan["profile"]).held_by is None  # its step's hold went with it
    run = deps.runs.get_run(plan["run_id"])
    assert run.status == RunStatus.FAILED and run.error == "execution ABORTED"


def test_a_step_of_a_run_that_ended_does_nothing_and_cannot_revive_it(deps: WorkerDeps) -> None:
    transport, seen = fake_server()
    deps.transport = transport
    _ready(deps, "deepseek-v4-flash")
    plan = _plan(deps, **SMALL)
    deps.runs.update_run(plan["run_id"], T0, status=RunStatus.FAILED, error="execution TIMED_OUT")
    with pytest.raises(RunEnded):
        run_action({"action": "calibrate", "state": {"plan": plan}, "execution": EXECUTION}, deps)
    with pytest.raises(RunEnded):
        run_action(_scenario_event(plan, plan["scenarios"][0]), deps)
    assert seen == [] and deps.profiles.get_profile("deepseek-v4-flash").held_by is None
    assert deps.runs.get_run(plan["run_id"]).status == RunStatus.FAILED


def test_finish_and_compare_again_keep_what_the_first_attempt_recorded(deps: WorkerDeps) -> None:
    done = _measured_run(deps)
    first = run_action({"action": "compare", "state": done["state"], "execution": EXECUTION}, deps)
    stored = deps.runs.list_comparisons(done["plan"]["run_id"])
    assert run_action({"action": "compare", "state": done["state"], "execution": EXECUTION}, deps) == first
    assert deps.runs.list_comparisons(done["plan"]["run_id"]) == stored
    ok = run_action({"action": "finish", "state": done["state"], "execution": EXECUTION}, deps)
    late = run_action({"action": "finish", "outcome": "FAILED", "state": done["state"], "execution": EXECUTION}, deps)
    assert ok["status"] == late["status"] == "SUCCEEDED"
    with pytest.raises(RunEnded):  # and no comparison is written for a run that ended
        deps.runs.put_comparison(stored[0].model_copy(update={"scenario": "in100-c9"}))
    deps.runs.update_run(done["plan"]["run_id"], T0, status=RunStatus.RUNNING)
    with pytest.raises(ResultExists):  # even while it runs, the first comparison stays
        deps.runs.put_comparison(stored[0])


def test_each_step_works_through_the_stores_of_its_own_run(deps: WorkerDeps) -> None:
    # Deployed, deps.scope hands out stores on BenchRunRole tagged with the run (and its profile when
    # the event names it); here it records what it was asked and serves the same stores.
    asked: list[tuple[str, str | None]] = []

    def scope(run_id: str, profile: str | None) -> tuple:
        asked.append((run_id, profile))
        return deps.runs, deps.records, deps.profiles

    scoped = dataclasses.replace(deps, scope=scope)
    _ready(deps, "deepseek-v4-flash")
    plan = _plan(scoped, **SMALL)
    assert asked == [(plan["run_id"], "deepseek-v4-flash")]  # plan: the id it gives the run, the profile asked for
    state = {"plan": plan}
    run_action({"action": "calibrate", "state": state, "execution": EXECUTION}, scoped)
    run_action(_scenario_event(plan, plan["scenarios"][0]), scoped)
    # calibrate names the plan (run and profile); a scenario event names only its run.
    assert asked[1:] == [(plan["run_id"], "deepseek-v4-flash"), (plan["run_id"], None)]
    with pytest.raises(RunNotFound):  # no run named: no scope asked for, the step says why
        run_action({"action": "compare", "state": {}, "execution": EXECUTION}, scoped)
    assert len(asked) == 3
