"""A run's own prompts inside the VPC, on in-memory stores against a fake OpenAI-compatible server
that counts tokens: what the CLI uploads and how it describes it, the worker's checks of the upload
(missing, too large, altered, of another shape), and every worker sending exactly its prompts (a
scenario each prompt once, split shards each prompt by exactly one shard)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import httpx
import pytest

from servingctl.loadgen.datasets import Dataset, DatasetError, DatasetPrompt, parse_dataset
from servingctl.runs import uploads
from servingctl.runs import worker as bench_worker
from servingctl.runs.matrix import MAX_RUN_PROMPTS, BenchmarkInput, UploadedDataset, parse_benchmark_input
from servingctl.runs.uploads import describe_upload, read_upload, upload_payload
from servingctl.runs.worker import WorkerDeps, run_action
from servingctl.schema.results import DatasetFingerprint, DatasetSpec
from servingctl.shared.errors import InvalidInput
from servingctl.store import MemoryStore
from servingctl.store.benchmarks import RunStatus
from servingctl.store.benchmarks_memory import MemoryBenchmarkStore
from servingctl.store.records import MemoryRecordStore, dataset_key
from tests.unit.runs.test_worker import EXECUTION, REGISTRY, FixedClock, _ready, streamed

PROFILE = "deepseek-v4-flash"


def _words(text: str) -> int:
    return len(text.split())


def counting_server() -> tuple[httpx.MockTransport, list[dict[str, Any]]]:
    """/tokenize counts words (+2 for the template); a stream answers max_tokens one-token chunks."""
    sent: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else {}
        if request.url.path == "/tokenize":
            if "messages" in body:
                return httpx.Response(200, json={"count": 2 + sum(_words(m["content"]) for m in body["messages"])})
            return httpx.Response(200, json={"count": _words(body["prompt"])})
        if request.url.path != "/v1/chat/completions":
            return httpx.Response(404, json={"error": "not found"})
        prompt = 2 + sum(_words(m["content"]) for m in body["messages"])
        if not body["stream"]:
            return httpx.Response(200, json={"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": 1}})
        sent.append(body)
        return streamed(body["max_tokens"], prompt)

    return httpx.MockTransport(handler), sent


@pytest.fixture
def deps() -> WorkerDeps:
    transport, _ = counting_server()
    return WorkerDeps(
        registry=REGISTRY,
        runs=MemoryBenchmarkStore(),
        records=MemoryRecordStore(),
        profiles=MemoryStore(),
        clock=FixedClock(),
        transport=transport,
    )


def user_file(count: int, *, references: bool = False, short: bool = False) -> Dataset:
    """A user's file as the CLI read it: prompt i has i+1 words (short: one), output i+2 tokens (or a
    reference of 2i+1 words)."""
    prompts = [
        DatasetPrompt(
            line=i + 1,
            messages=(("user", "w0" if short else " ".join(f"w{k}" for k in range(i + 1))),),
            output_tokens=None if references else i + 2,
            reference=" ".join("r" for _ in range(2 * i + 1)) if references else None,
        )
        for i in range(count)
    ]
    fingerprint = DatasetFingerprint(
        source="/home/me/prompts.jsonl",
        format="jsonl",
        sha256="a" * 64,
        prompts=count,
        entries=count + 3,
        output_tokens="dataset",
    )
    return Dataset(prompts, fingerprint)


def uploaded(deps: WorkerDeps, run_id: str, file: Dataset, max_tokens: int = 8) -> UploadedDataset:
    """What the CLI does: the payload under the run's key, and its description."""
    payload = upload_payload(file)
    assert isinstance(deps.records, MemoryRecordStore)
    deps.records.objects[dataset_key(run_id)] = payload
    return describe_upload(file, payload, max_tokens)


RUN_ID = "20261202T100000Z-data"


def _plan(deps: WorkerDeps, described: UploadedDataset, **given: Any) -> dict[str, Any]:
    state = {
        "profile": PROFILE,
        "run_id": RUN_ID,
        "mode": "sustained",
        "warmup": 0,
        "max_tokens": 8,
        "dataset": described.model_dump(mode="json"),
        **given,
    }
    return run_action({"action": "plan", "state": state, "execution": EXECUTION, "started_at": "2026-12-02T10:00:00Z"}, deps)


def test_the_upload_is_the_prompts_taken_and_its_description_the_files_fingerprint() -> None:
    file = user_file(5, references=True)
    payload = upload_payload(file)
    back = parse_dataset(payload, DatasetSpec(source="upload", format="jsonl", output_tokens="dataset"))
    assert [(p.messages, p.reference, p.output_tokens) for p in back.prompts] == [
        (p.messages, p.reference, p.output_tokens) for p in file.prompts
    ]
    described = describe_upload(file, payload, max_tokens=8)
    assert described.sha256 == hashlib.sha256(payload).hexdigest() and described.prompts == 5
    assert described.file.source == "prompts.jsonl" and described.file.entries == 8  # the base name, never a path
    assert described.input_bytes == sum(len(" ".join(f"w{k}" for k in range(i + 1))) for i in range(5))
    # A reference bounds its tokens by its bytes (+ special tokens): never under the real count.
    assert described.output_tokens_bound == sum(len(" ".join("r" * (2 * i + 1))) + uploads.SPECIAL_TOKENS_BOUND for i in range(5))
    # Output lengths from --max-tokens: the references are not uploaded.
    plain = Dataset(file.prompts, file.fingerprint.model_copy(update={"output_tokens": "max-tokens"}))
    assert b"reference" not in upload_payload(plain)


def test_a_run_takes_max_prompts_and_one_more_is_refused_naming_the_way_out() -> None:
    most = user_file(MAX_RUN_PROMPTS, short=True)
    assert describe_upload(most, upload_payload(most), 8).prompts == MAX_RUN_PROMPTS
    with pytest.raises(DatasetError, match=f"at most {MAX_RUN_PROMPTS} .*--num-prompts"):
        upload_payload(user_file(MAX_RUN_PROMPTS + 1, short=True))


def test_the_upload_size_limit_at_the_limit_and_one_past(monkeypatch: pytest.MonkeyPatch) -> None:
    file = user_file(3)
    size = len(upload_payload(file))
    monkeypatch.setattr(uploads, "MAX_UPLOAD_BYTES", size)
    assert upload_payload(file)
    monkeypatch.setattr(uploads, "MAX_UPLOAD_BYTES", size - 1)
    with pytest.raises(DatasetError, match=f"{size} bytes as JSONL; a run inside the VPC takes at most {size - 1}"):
        upload_payload(file)


def test_a_dataset_run_sends_each_prompt_once_with_its_own_length_and_records_the_files_fingerprint(deps: WorkerDeps) -> None:
    transport, sent = counting_server()
    deps.transport = transport
    _ready(deps, PROFILE)
    described = uploaded(deps, RUN_ID, user_file(5))
    plan = _plan(deps, described, concurrencies=[2])
    assert [s["name"] for s in plan["scenarios"]] == ["dataset-c2-sustained"]
    state = {"profile": PROFILE, "plan": plan}
    run_action({"action": "calibrate", "state": state, "execution": EXECUTION}, deps)
    [scenario] = plan["scenarios"]
    run_action({"action": "run_scenario", "state": {"run_id": RUN_ID, "scenario": scenario}, "execution": EXECUTION}, deps)
    assert sorted(len(b["messages"][0]["content"].split()) for b in sent) == [1, 2, 3, 4, 5]
    assert sorted(b["max_tokens"] for b in sent) == [2, 3, 4, 5, 6]
    [stored] = deps.runs.list_scenarios(RUN_ID)
    summary = stored.summary
    assert summary.requests == summary.ok == 5 and summary.mismatches.prompt_tokens == 0
    run = deps.runs.get_run(RUN_ID)
    assert run is not None and run.status == RunStatus.RUNNING
    assert run.reproducibility.dataset == described.file and run.config.dataset is not None
    assert run.config.dataset.source == f"memory://{dataset_key(RUN_ID)}"


def test_split_shards_send_every_prompt_by_exactly_one_shard(deps: WorkerDeps) -> None:
    transport, sent = counting_server()
    deps.transport = transport
    _ready(deps, PROFILE)
    plan = _plan(deps, uploaded(deps, RUN_ID, user_file(7)), concurrencies=[3])
    run_action({"action": "calibrate", "state": {"profile": PROFILE, "plan": plan}, "execution": EXECUTION}, deps)
    [scenario] = plan["scenarios"]
    for index, concurrency in ((0, 2), (1, 1)):
        start_at = "2026-12-02T10:00:00+00:00"
        shard = {"index": index, "count": 2, "concurrency": concurrency, "requests": None, "start_at": start_at}
        run_action(
            {"action": "run_shard", "state": {"run_id": RUN_ID, "scenario": scenario, "shard": shard}, "execution": EXECUTION},
            deps,
        )
    words = [len(b["messages"][0]["content"].split()) for b in sent]
    assert sorted(words) == [1, 2, 3, 4, 5, 6, 7]  # each prompt once over both shards


def _given(described: UploadedDataset, **given: Any) -> BenchmarkInput:
    document = {
        "profile": PROFILE,
        "run_id": RUN_ID,
        "mode": "sustained",
        "max_tokens": 8,
        "dataset": described.model_dump(mode="json"),
    }
    return parse_benchmark_input(document | given)


def test_the_worker_refuses_a_missing_altered_or_reshaped_upload_naming_the_field(deps: WorkerDeps) -> None:
    file = user_file(4)
    payload = upload_payload(file)
    described = describe_upload(file, payload, 8)
    with pytest.raises(InvalidInput, match=r"nothing uploaded at memory://runs/r1/dataset\.jsonl; .*POST /benchmarks/r1/dataset"):
        read_upload(deps.records, "r1", _given(described))
    assert isinstance(deps.records, MemoryRecordStore)
    deps.records.objects[dataset_key("r1")] = payload + b"\n"
    with pytest.raises(InvalidInput, match=r"dataset.sha256: [0-9a-f]{64}, but the upload at memory://runs/r1/dataset.jsonl has"):
        read_upload(deps.records, "r1", _given(described))
    deps.records.objects[dataset_key("r1")] = payload
    other = described.model_copy(update={"prompts": 5})
    with pytest.raises(InvalidInput, match=r"dataset\.prompts: 5, but the upload at memory://runs/r1/dataset\.jsonl has 4"):
        read_upload(deps.records, "r1", _given(other))
    assert [p.messages for p in read_upload(deps.records, "r1", _given(described)).prompts] == [p.messages for p in file.prompts]


def test_a_plan_with_a_bad_upload_fails_before_anything_starts(deps: WorkerDeps) -> None:
    described = describe_upload(user_file(2), upload_payload(user_file(2)), 8)
    with pytest.raises(InvalidInput, match="dataset: nothing uploaded"):
        _plan(deps, described, start=True)
    assert deps.runs.get_run(RUN_ID) is None


def test_dataset_input_rules_name_the_field(deps: WorkerDeps) -> None:
    file = user_file(3)
    described = describe_upload(file, upload_payload(file), 8)
    with pytest.raises(InvalidInput, match="replay_speed: replays the dataset's timestamps; the dataset has none"):
        _given(described, replay_speed=2.0)
    talks = described.model_copy(update={"conversations": 2})
    with pytest.raises(InvalidInput, match="mode: conversations run in mode sustained; got burst"):
        _given(talks, mode="burst")
    with pytest.raises(InvalidInput, match="salt_mode: prompt-nonce changes the prompts' lengths"):
        _given(described, salt_mode="prompt-nonce")
    with pytest.raises(InvalidInput, match=r"dataset\.prompts: Input should be less than or equal to 10000"):
        _given(described.model_copy(update={"prompts": MAX_RUN_PROMPTS + 1}))
    assert _given(described.model_copy(update={"prompts": MAX_RUN_PROMPTS})).dataset is not None


def test_a_split_never_has_more_shards_than_the_dataset_has_prompts_or_conversations(deps: WorkerDeps) -> None:
    _ready(deps, PROFILE)
    plan = _plan(deps, uploaded(deps, RUN_ID, user_file(2)), concurrencies=[4], client_cpu_limit=0.0, max_workers=4)
    run_action({"action": "calibrate", "state": {"profile": PROFILE, "plan": plan}, "execution": EXECUTION}, deps)
    [scenario] = plan["scenarios"]
    answer = run_action(
        {"action": "run_scenario", "state": {"run_id": RUN_ID, "scenario": scenario}, "execution": EXECUTION}, deps
    )
    assert answer["client_bound"] and [s["shard"]["count"] for s in answer["shards"]] == [2, 2]  # 4 workers asked, 2 prompts
    # Each shard starts late enough to read and count its prompts first.
    lead, parts = bench_worker.shard_terms(_given(uploaded(deps, "r2", user_file(5000, short=True))))
    assert parts == 5000 and lead == bench_worker.START_LEAD_S + 5000 * bench_worker.COUNTED_PROMPTS_S


def test_the_estimate_counts_a_datasets_longest_request_and_conversation_and_a_drawn_output() -> None:
    from servingctl.runs.matrix import estimate_seconds

    file = user_file(8)
    described = describe_upload(file, upload_payload(file), 8)
    assert (described.max_input_bytes, described.max_output_tokens) == (len(" ".join(f"w{k}" for k in range(8))), 9)
    given = _given(described, expected_tok_s=1.0, warmup=0)
    # 8 prompts at 4 streams: a mean request, then the longest one ends last (at 1 tok/s: 9 s of output).
    mean = described.input_bytes / 8 * 4 / 1000 + described.output_tokens_bound / 8
    longest = described.max_input_bytes * 4 / 1000 + 9
    assert estimate_seconds(given, 0, 4) == pytest.approx(mean + longest)
    # One conversation of 8 turns with think time: the turns run one after the other on one stream.
    talk = given.model_copy(
        update={"dataset": described.model_copy(update={"conversations": 1, "longest_conversation": 8}), "think_time_s": 2.0}
    )
    assert estimate_seconds(talk, 0, 4) == pytest.approx(8 * (longest + 2.0))
    # Output lengths drawn from a distribution: its bound, not the file's.
    drawn = _given(described, expected_tok_s=1.0, warmup=0, output_distribution={"kind": "uniform", "low": 100, "high": 4000})
    assert estimate_seconds(drawn, 0, 4) > 2 * 4000


def test_a_dataset_the_engine_refuses_is_refused_at_plan_before_any_start(deps: WorkerDeps) -> None:
    talk = Dataset(
        [DatasetPrompt(line=1, messages=(("system", "be brief"), ("user", "hi")), output_tokens=4)], user_file(1).fingerprint
    )
    described = uploaded(deps, RUN_ID, talk)
    with pytest.raises(InvalidInput, match=r"messages: /v1/completions sends one prompt; this line has 2 messages"):
        _plan(deps, described, start=True, api="completions")
    assert deps.runs.get_run(RUN_ID) is None
    no_id = _given(described).model_copy(update={"run_id": None})
    with pytest.raises(InvalidInput, match="run_id: required with a dataset"):
        read_upload(deps.records, RUN_ID, no_id)
