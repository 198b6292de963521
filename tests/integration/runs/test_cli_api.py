"""Benchmarks through the twin's REST API and the servingctl command: `bench --profile` starts a run
in the VPC and writes the report, `runs` lists it, `report RUN_ID --compare RUN_ID` renders two stored
runs side by side, and the API refuses bad requests naming the field."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

from servingctl.loadgen.outputs import read_results
from servingctl.runs import worker as bench_worker
from servingctl.store.benchmarks_dynamodb import DynamoBenchmarkStore
from servingctl_twin.twin import Twin
from tests.integration.runs.conftest import POLL, twin_with_api

PROFILE = "deepseek-v4-flash"
MATRIX = ["--input-tokens", "64,128", "--concurrency", "1,2", "--warmup", "1", "--rounds", "3", "--max-tokens", "16"]


@pytest.fixture(scope="module")
def twin() -> Iterator[Twin]:
    """A twin serving the REST API over HTTP (overrides the conftest's)."""
    with twin_with_api() as running:
        yield running


def _json(out: str) -> Any:
    """The command's JSON answer: its last stdout line (in-process handlers log JSON lines to stdout too)."""
    return json.loads(out.strip().splitlines()[-1])


def _json_block(out: str) -> Any:
    """An indented JSON answer: from its last line that opens an object to the end."""
    lines = out.strip().splitlines()
    return json.loads("\n".join(lines[max(i for i, line in enumerate(lines) if line == "{") :]))


def test_bench_profile_runs_in_the_vpc_then_runs_and_report_compare_read_it_back(twin: Twin, cli: Any, tmp_path: Path) -> None:
    code, out, err = cli(
        "bench",
        "--profile",
        PROFILE,
        "--start",
        *MATRIX,
        "--label",
        "first",
        "--seed",
        "7",
        "--output",
        str(tmp_path / "first"),
        "--json",
    )
    assert code == 0, out[-2000:] + err
    first = _json(out)
    assert first["status"] == "SUCCEEDED" and [s["name"] for s in first["scenarios"]] == [
        "in64-c1",
        "in64-c2",
        "in128-c1",
        "in128-c2",
    ]
    assert "PENDING" in err and "in128-c2 written (4/4)" in err  # progress as scenarios were written
    files = {Path(p).relative_to(tmp_path / "first").as_posix() for p in first["files"]}
    assert {"results.json", "report.md", "output_tok_s.png", "ttft.png", "vllm/in64-c1.json"} <= files
    run = read_results(tmp_path / "first")
    assert len(run.scenarios) == 4 and all(len(s.records) == 4 * s.summary.concurrency for s in run.scenarios)
    # the server's /metrics over time came back from DynamoDB with each scenario, and is charted
    assert all(s.server_timeline and s.server_timeline[0].running is not None for s in run.scenarios)
    assert "server_metrics.png" in files and run.metadata.client_host is not None
    assert run.config.seed == 7 and run.config.headers == {"X-LLM-Profile": PROFILE}
    # the costs in the report are the ones stored at the profile's instance price
    assert set(first["costs"]) == {s["name"] for s in first["scenarios"]}
    assert "## Cost per token" in (tmp_path / "first/report.md").read_text()

    code, out, err = cli("bench", "--profile", PROFILE, "--stop", *MATRIX, "--label", "second", "--json")
    assert code == 0, out[-2000:] + err
    second_id = _json(out)["run_id"]
    # --json without --output: the data on stdout, no files written into the current directory
    assert _json(out)["files"] == [] and not (tmp_path / "servingctl-runs").exists()

    code, out, _ = cli("runs", "--profile", PROFILE, "--json")
    listed = _json(out)
    assert [r["run_id"] for r in listed] == [second_id, run.metadata.run_id]
    assert [r["label"] for r in listed] == ["second", "first"] and {r["status"] for r in listed} == {"SUCCEEDED"}

    code, out, err = cli("report", second_id, "--compare", run.metadata.run_id, "--output", str(tmp_path / "both"), "--json")
    assert code == 0, out[-2000:] + err
    report = _json_block(out)
    assert report["baseline_run_id"] == run.metadata.run_id and len(report["comparison"]) == 4
    assert (tmp_path / "both/compare.png").is_file() and (tmp_path / "both/report.md").is_file()
    stored = read_results(tmp_path / "both")
    assert stored.metadata.run_id == second_id and all(s.records for s in stored.scenarios)  # records from S3
    # the numbers printed and written are the ones stored in DynamoDB
    resource = boto3.resource(
        "dynamodb",
        endpoint_url=twin.endpoint_url,
        region_name=twin.region,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    summaries = {s.name: s.summary for s in DynamoBenchmarkStore(twin.table_name, resource).list_scenarios(second_id)}
    assert {r["name"]: r["output_tok_s"] for r in report["scenarios"]} == {n: s.output_tok_s for n, s in summaries.items()}
    assert {s.summary.name: s.summary for s in stored.scenarios} == summaries

    # each figure with its interval where both runs have 5 units or more (TTFT of c2: 3 rounds x 2
    # requests; of c1: 3, too few); output tok/s resamples the 3 rounds: too few
    figures = {(c["name"], f["label"]): f for c in report["comparison"] for f in c["figures"]}
    assert {name: f["units"] for (name, label), f in figures.items() if label == "TTFT ms"} == {
        "in64-c1": [3, 3],
        "in64-c2": [6, 6],
        "in128-c1": [3, 3],
        "in128-c2": [6, 6],
    }
    assert {f["units"][0] for (_, label), f in figures.items() if label == "output tok/s"} == {3}
    called = 0
    for (name, label), f in figures.items():
        if f["baseline"] == 0:  # the simulator can stream a whole answer in one step: ITL 0
            assert f["verdict"] == "baseline 0" and f["low_pct"] is None
            continue
        enough = min(f["units"]) >= 5
        assert (f["low_pct"] is not None) == enough, (name, label, f)
        assert f["verdict"] in (("faster", "slower", "no change detected") if enough else ("too few",))
        if enough:
            called += 1
            assert f["low_pct"] <= f["change_pct"] <= f["high_pct"]
    assert called >= 2  # TTFT of both c2 scenarios at least
    fingerprints = {row["field"]: row for row in report["fingerprints"]}
    assert fingerprints["instance"]["run"] == fingerprints["instance"]["baseline"] and not fingerprints["instance"]["differs"]
    assert fingerprints["instance"]["run"].startswith("g7e.12xlarge") and fingerprints["image"]["run"]
    assert {"client CPU", "client load (1 min)", "engine", "max_num_seqs", "revision"} <= set(fingerprints)
    assert fingerprints["load"]["differs"] and "seed 7" in fingerprints["load"]["baseline"]  # the first run's --seed 7
    # the same comparison as a person reads it, piped at 80 columns
    code, out, _ = cli("report", second_id, "--compare", run.metadata.run_id, "--no-files")
    assert code == 0
    table = out[out.index("(baseline) ->") :]
    assert all(len(line) <= 80 for line in table.splitlines()), table
    assert "in64-c2" in table and "too few to compare" in table and "fingerprints (* differs)" in table
    assert "  instance " in table and "  * instance" not in table

    code, out, _ = cli("status", PROFILE, "--json")
    assert _json(out)["phase"] == "STOPPED"  # --stop stopped it


def test_waiting_on_a_run_whose_requests_all_failed_prints_why_and_exits_1(
    twin: Twin, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = bench_worker.measure_scenario

    async def refused(*args: Any, **kwargs: Any) -> Any:  # every streamed request answered 503
        def handler(request: httpx.Request) -> httpx.Response:
            return httpx.Response(503, json={"error": "no healthy upstream"})

        return await real(*args, **{**kwargs, "transport": httpx.MockTransport(handler)})

    monkeypatch.setattr(bench_worker, "measure_scenario", refused)
    assert twin.router is not None
    with twin.router.in_process():  # so the handlers see the patch
        argv = ("--input-tokens", "64", "--concurrency", "1", "--warmup", "0", "--rounds", "2", "--max-tokens", "16")
        code, out, err = cli("bench", "--profile", PROFILE, "--start", "--stop", *argv, "--no-wait", "--json")
        assert code == 0, out[-2000:] + err
        run_id = _json(out)["run_id"]
        code, out, err = cli("wait", run_id)
    why = 'in64-c1: 2 of 2 failed (100.0%): http_status 2 (e.g. HTTP 503: {"error":"no healthy upstream"})'
    assert code == 1 and "run FAILED" in err and why in " ".join(err.split()), err
    code, out, _ = cli("wait", run_id, "--json")  # the same, for a script
    assert code == 1 and _json(out)["status"] == "FAILED" and why in _json(out)["error"]
    detail = httpx.get(f"{twin.api_url}/benchmarks/{run_id}", timeout=30, auth=twin.api_auth()).json()
    assert detail["execution_status"] == "FAILED" and detail["status"] == "FAILED"
    code, out, _ = cli("status", PROFILE, "--json")
    assert _json(out)["phase"] == "STOPPED"  # --stop stopped it before the execution failed


def test_the_api_refuses_bad_benchmarks_naming_the_field(twin: Twin) -> None:
    api = twin.api_url
    answer = httpx.post(f"{api}/benchmarks", json={"profile": PROFILE, "concurrencies": [0]}, timeout=30, auth=twin.api_auth())
    assert answer.status_code == 400 and "concurrencies" in answer.json()["message"]
    answer = httpx.post(f"{api}/benchmarks", json={"profile": "nope"}, timeout=30, auth=twin.api_auth())
    assert answer.status_code == 400 and answer.json()["field"] == "body.profile"
    answer = httpx.post(
        f"{api}/benchmarks",
        json={"profile": PROFILE, "input_tokens": [8192], "rounds": 20, "runner": "lambda"},
        timeout=30,
        auth=twin.api_auth(),
    )
    assert answer.status_code == 400 and "more than the 780 s a Lambda worker may take" in answer.json()["message"]
    answer = httpx.post(
        f"{api}/benchmarks", json={"profile": "nemotron-nano"}, timeout=30, auth=twin.api_auth()
    )  # never started here
    assert (
        answer.status_code == 409 and answer.json()["field"] == "body.start" and "STOPPED, not READY" in answer.json()["message"]
    )
    assert httpx.get(f"{api}/benchmarks/20250101T000000Z-none", timeout=30, auth=twin.api_auth()).status_code == 404
    assert httpx.get(f"{api}/benchmarks", params={"profile": "nope"}, timeout=30, auth=twin.api_auth()).status_code == 404


def test_posting_the_same_run_again_joins_it_and_another_input_under_its_id_is_refused(twin: Twin) -> None:
    api = twin.api_url
    body = {
        "profile": "nemotron-nano",
        "start": True,
        "stop": True,
        "input_tokens": [64],
        "concurrencies": [1],
        "warmup": 0,
        "rounds": 1,
        "max_tokens": 8,
        "run_id": "20261202T000000Z-same",
        "start_options": {"poll": POLL},
        "stop_options": {"poll": POLL},
    }
    first = httpx.post(f"{api}/benchmarks", json=body, timeout=30, auth=twin.api_auth())
    again = httpx.post(f"{api}/benchmarks", json=body, timeout=30, auth=twin.api_auth())
    assert first.status_code == again.status_code == 202 and first.json() == again.json()
    other = httpx.post(f"{api}/benchmarks", json=body | {"label": "another"}, timeout=30, auth=twin.api_auth())
    assert other.status_code == 409 and other.json()["field"] == "body.run_id"
    deadline = time.monotonic() + 180
    while (detail := httpx.get(f"{api}/benchmarks/{body['run_id']}", timeout=30, auth=twin.api_auth()).json())[
        "execution_status"
    ] == "RUNNING":
        assert time.monotonic() < deadline, "the run never ended"
        time.sleep(0.5)
    assert detail["status"] == "SUCCEEDED" and detail["scenarios_written"] == ["in64-c1"]
    assert set(detail["records_urls"]) == {"in64-c1"} and detail["reproducibility"]["instance_type"] == "g7e.2xlarge"


def test_bench_profile_refuses_endpoint_flags(cli: Any) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli("bench", "--profile", PROFILE, "--endpoint", "http://x")
    assert exit_info.value.code == 2


def test_a_run_whose_execution_is_aborted_reads_failed_with_the_abort_not_running_for_ever(twin: Twin, cli: Any) -> None:
    api = twin.api_url
    body = {
        "profile": "nemotron-nano",
        "start": True,
        "input_tokens": [64],
        "concurrencies": [1, 2, 4],
        "warmup": 0,
        "rounds": 50,
        "max_tokens": 64,
        "run_id": "20261202T000000Z-abort",
        "start_options": {"poll": POLL},
    }
    ref = httpx.post(f"{api}/benchmarks", json=body, timeout=30, auth=twin.api_auth())
    assert ref.status_code == 202, ref.text
    deadline = time.monotonic() + 180
    while httpx.get(f"{api}/benchmarks/{body['run_id']}", timeout=30, auth=twin.api_auth()).json()["status"] != "RUNNING":
        assert time.monotonic() < deadline, "the run never got to its scenarios"
        time.sleep(0.2)
    twin.client("stepfunctions").stop_execution(executionArn=ref.json()["execution_arn"], cause="aborted from the console")
    detail = httpx.get(f"{api}/benchmarks/{body['run_id']}", timeout=30, auth=twin.api_auth()).json()
    assert detail["execution_status"] == "ABORTED" and detail["status"] == "FAILED"
    assert "ABORTED" in detail["error"]
    code, _, err = cli("wait", body["run_id"])
    assert code == 1 and "FAILED" in err
    code, out, err = cli("stop", "nemotron-nano", "--wait")
    assert code == 0, out[-2000:] + err
