"""A user's own prompts run inside the VPC: `servingctl bench --profile NAME --dataset FILE` reads the
file here, uploads the prompts it took through the API's presigned URL, and the run's workers send
exactly those (each once, with its own output length and checks) against the profile on the twin.
An upload that is missing, altered or sent twice is refused, and nothing starts for a refused one."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from servingctl.loadgen.outputs import read_results
from servingctl.store.records import S3RecordStore, dataset_key
from servingctl_twin.twin import Twin
from tests.integration.runs.conftest import twin_with_api

PROFILE = "deepseek-v4-flash"


@pytest.fixture(scope="module")
def twin() -> Iterator[Twin]:
    """A twin serving the REST API over HTTP (overrides the conftest's)."""
    with twin_with_api() as running:
        yield running


def sharegpt(path: Path, entries: int) -> Path:
    """A ShareGPT file: entry i asks a question of i+1 sentences and has an answer of 2i+3 words; one
    entry with a single turn (vllm bench serve skips it, and so do we)."""
    rows: list[dict[str, Any]] = [
        {
            "conversations": [
                {"from": "human", "value": " ".join(f"Question {i} sentence {k}." for k in range(i + 1))},
                {"from": "gpt", "value": " ".join(f"w{k}" for k in range(2 * i + 3))},
            ]
        }
        for i in range(entries)
    ]
    rows.insert(2, {"conversations": [{"from": "human", "value": "alone"}]})
    path.write_text(json.dumps(rows))
    return path


def _detail(twin: Twin, run_id: str) -> dict[str, Any]:
    answer = httpx.get(f"{twin.api_url}/benchmarks/{run_id}", timeout=30, auth=twin.api_auth())
    assert answer.status_code == 200, answer.text
    detail: dict[str, Any] = answer.json()
    return detail


def _ended(twin: Twin, run_id: str, timeout_s: float = 180) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while (detail := _detail(twin, run_id))["execution_status"] in (None, "RUNNING"):
        assert time.monotonic() < deadline, "the run never ended"
        time.sleep(0.5)
    return detail


def test_a_sharegpt_file_runs_inside_the_vpc_each_prompt_once_with_its_own_lengths(twin: Twin, cli: Any, tmp_path: Path) -> None:
    source = sharegpt(tmp_path / "share.json", 12)
    out_dir = tmp_path / "out"
    code, out, err = cli(
        "bench",
        "--profile",
        PROFILE,
        "--start",
        "--stop",
        "--dataset",
        str(source),
        "--num-prompts",
        "10",
        "--dataset-output-tokens",
        "dataset",
        "--concurrency",
        "3",
        "--warmup",
        "0",
        "--output",
        str(out_dir),
        "--json",
    )
    assert code == 0, out[-3000:] + err[-3000:]
    run = read_results(str(out_dir / "results.json"))
    [scenario] = run.scenarios
    summary = scenario.summary
    assert summary.name == "dataset-c3-sustained" and summary.mode == "sustained"
    # The first 10 usable entries, each sent once, answered with its reference's length, checked.
    assert summary.requests == 10 and summary.ok == 10 and summary.failed == 0
    assert summary.mismatches.prompt_tokens == 0 and summary.mismatches.completion_tokens == 0
    assert summary.server.generation_tokens_equal is True and summary.server.prompt_tokens_delta == sum(
        r.prompt_tokens or 0 for r in scenario.records
    )
    assert len({r.completion_tokens for r in scenario.records}) == 10  # every answer its own length
    # The fingerprint is the user's file's, as on this machine.
    assert run.dataset is not None
    assert run.dataset.sha256 == hashlib.sha256(source.read_bytes()).hexdigest()
    assert (run.dataset.source, run.dataset.format, run.dataset.prompts, run.dataset.entries, run.dataset.skipped) == (
        "share.json",
        "sharegpt",
        10,
        12,
        1,
    )
    # What was uploaded is the 10 prompts taken, as JSONL, under the run's prefix.
    records = S3RecordStore(twin.bucket_name, twin.client("s3"))
    uploaded = records.get_bytes(dataset_key(run.metadata.run_id), 1 << 20).decode().splitlines()
    assert len(uploaded) == 10 and json.loads(uploaded[0])["messages"][0]["content"] == "Question 0 sentence 0."


def test_a_malformed_file_is_refused_naming_the_line_and_nothing_is_uploaded_or_started(
    twin: Twin, cli: Any, tmp_path: Path
) -> None:
    bad = tmp_path / "prompts.jsonl"
    bad.write_text('{"prompt": "fine"}\n{"prompt": "also fine", "output_tokens": -3}\n')
    before = httpx.get(f"{twin.api_url}/benchmarks", timeout=30, auth=twin.api_auth()).json()
    code, _, err = cli("bench", "--profile", PROFILE, "--start", "--dataset", str(bad))
    assert code == 2 and "line 2: output_tokens: -3; expected an integer >= 1" in err and "nothing was sent" in err
    after = httpx.get(f"{twin.api_url}/benchmarks", timeout=30, auth=twin.api_auth()).json()
    assert after == before


def _upload(twin: Twin, run_id: str, payload: bytes, sha256: str | None = None) -> httpx.Response:
    answer = httpx.post(
        f"{twin.api_url}/benchmarks/{run_id}/dataset",
        json={"size_bytes": len(payload), "sha256": sha256 or hashlib.sha256(payload).hexdigest()},
        timeout=30,
        auth=twin.api_auth(),
    )
    assert answer.status_code == 200, answer.text
    upload = answer.json()
    return httpx.put(upload["url"], content=payload, headers=upload["headers"], timeout=30)


def _described(payload: bytes, prompts: int) -> dict[str, Any]:
    digest = hashlib.sha256(payload).hexdigest()
    return {
        "sha256": digest,
        "prompts": prompts,
        "input_bytes": 5 * prompts,
        "max_input_bytes": 5,
        "output_tokens_bound": 8 * prompts,
        "max_output_tokens": 8,
        "file": {"source": "p.jsonl", "format": "jsonl", "sha256": digest, "prompts": prompts, "entries": prompts},
    }


def test_an_upload_is_taken_once_and_only_with_the_bytes_it_was_signed_for(twin: Twin) -> None:
    payload = b'{"messages":[{"role":"user","content":"hello"}]}\n'
    assert _upload(twin, "20261206T000000Z-once", payload).status_code == 200
    # The same run's prompts again: S3 refuses to replace them (If-None-Match).
    assert _upload(twin, "20261206T000000Z-once", payload).status_code == 412
    # Other bytes than the sha256 signed: S3 refuses them.
    refused = _upload(twin, "20261206T000000Z-other", payload, sha256="0" * 64)
    assert refused.status_code == 400 and "<Code>BadDigest</Code>" in refused.text, refused.text


def test_a_run_whose_upload_is_missing_or_altered_is_refused_and_starts_nothing(twin: Twin) -> None:
    api, auth = twin.api_url, twin.api_auth()
    payload = b'{"messages":[{"role":"user","content":"hello"}],"output_tokens":8}\n'
    body = {"profile": "nemotron-nano", "start": True, "mode": "sustained", "max_tokens": 8, "concurrencies": [1]}
    # No run id: the API cannot know which upload is meant.
    answer = httpx.post(f"{api}/benchmarks", json=body | {"dataset": _described(payload, 1)}, timeout=30, auth=auth)
    assert answer.status_code == 400 and answer.json()["field"] == "body.run_id", answer.text
    # Nothing uploaded: the API says so at once.
    missing = body | {"run_id": "20261206T000000Z-none", "dataset": _described(payload, 1)}
    answer = httpx.post(f"{api}/benchmarks", json=missing, timeout=30, auth=auth)
    assert answer.status_code == 400 and answer.json()["field"] == "body.dataset", answer.text
    assert "nothing uploaded at s3://" in answer.json()["message"]
    # Uploaded, but described as other prompts: the worker's plan refuses it before any start.
    assert _upload(twin, "20261206T000000Z-tampered", payload).status_code == 200
    described = _described(payload, 1) | {"sha256": "f" * 64}
    answer = httpx.post(
        f"{api}/benchmarks", json=body | {"run_id": "20261206T000000Z-tampered", "dataset": described}, timeout=30, auth=auth
    )
    assert answer.status_code == 202, answer.text
    detail = _ended(twin, "20261206T000000Z-tampered")
    assert detail["status"] == "FAILED" and "dataset.sha256" in (detail["error"] or ""), detail
    profile = httpx.get(f"{api}/profiles/nemotron-nano", timeout=30, auth=auth).json()
    assert profile["phase"] == "STOPPED"
