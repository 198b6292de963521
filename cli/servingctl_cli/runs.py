"""Benchmarks through the REST API: `servingctl bench --profile NAME ...` starts a run inside the VPC
(run_benchmark) and follows it, `servingctl runs` lists runs, and `servingctl report RUN_ID` gets
a stored run (summaries from DynamoDB, per-request records from S3 through presigned links) so the
usual outputs can render it.
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import BaseModel
from rich.console import Console

from servingctl import render
from servingctl.costs import Comparison, priced_api
from servingctl.loadgen.datasets import DatasetError
from servingctl.runs.matrix import RUN_ID_PATTERN
from servingctl.schema.results import RunResult
from servingctl.store.records import decode_records
from servingctl_cli.client import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    ApiError,
    Client,
    Unreachable,
    add_api_arguments,
    answer_as,
    answers_as,
    api_command,
    connect,
)
from servingctl_cli.interrupt import interrupted, unanswered
from servingctl_cli.main import summary

if TYPE_CHECKING:
    # The API's models load with the command that reads them: `--help` stays fast.
    from servingctl.api.benchmarks import BenchmarkDetail

FOLLOW_INTERVAL_S = 1.0
RUN_ID = re.compile(RUN_ID_PATTERN)
# Where `servingctl report RUN_ID` and `servingctl bench --profile` write files by default.
RUNS_DIR = Path("servingctl-runs")
# bench flag -> run_benchmark input field (the flags of the local bench, same meaning).
FIELDS = {
    "input_tokens": "input_tokens",
    "concurrency": "concurrencies",
    "mode": "mode",
    "rate": "rate",
    "rounds": "rounds",
    "requests": "requests",
    "duration": "duration_s",
    "max_tokens": "max_tokens",
    "seed": "seed",
    "salt_mode": "salt_mode",
    "max_failure_rate": "max_failure_rate",
    "timeout": "timeout_s",
    "max_workers": "max_workers",
    "slo_share": "slo_share",
    "sweep_max_concurrency": "sweep_max_concurrency",
    "sweep_max_steps": "sweep_max_steps",
    "api": "api",
    "think_time": "think_time_s",
    "replay": "replay_speed",
    "input_dist": "input_distribution",
    "output_dist": "output_distribution",
}


class RunNotAvailable(Exception):
    """A run id the API could not hand over (unknown, unreachable, or not finished)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `runs` (bench --profile and report RUN_ID are flags of their own commands)."""
    runs = subparsers.add_parser("runs", help=summary("runs"))
    runs.add_argument("--profile", help="only this profile's runs")
    runs.add_argument("--limit", type=int, default=20, help="at most this many runs (default 20)")
    add_api_arguments(runs)
    runs.set_defaults(func=api_command(_runs))
    sub = runs.add_subparsers(dest="runs_command", metavar="SUBCOMMAND", required=False)
    cancel = sub.add_parser(
        "cancel",
        help="cancel a run: its execution and ECS task stopped, the run CANCELLED, its stop started if it asked for one",
    )
    cancel.add_argument("run_id", metavar="RUN_ID", help="what bench --profile printed (servingctl runs lists them)")
    add_api_arguments(cancel)
    cancel.set_defaults(func=api_command(_cancel))


def _runs(args: argparse.Namespace, client: Client) -> int:
    from servingctl.api.benchmarks import BenchmarkSummary

    answer = client.get("/benchmarks", {"profile": args.profile, "limit": args.limit})
    runs = answers_as(BenchmarkSummary, answer, "GET /benchmarks")
    if args.json:
        print(json.dumps(answer))
        return EXIT_OK
    if not runs:
        print(
            "no benchmark runs yet"
            + (f" of {args.profile}" if args.profile else "")
            + " (start one with: servingctl bench --profile NAME)"
        )
        return EXIT_OK
    rows = [(r.run_id, r.profile, r.status, render.when(r.finished_at, short=True), str(len(r.scenarios))) for r in runs]
    notes = ["; ".join(x for x in (r.label and f"label: {r.label}", r.error and f"error: {r.error}") if x) for r in runs]
    print(render.columns_with_notes(("run id", "profile", "status", "finished UTC", "scenarios"), rows, notes))
    return EXIT_OK


def _cancel(args: argparse.Namespace, client: Client) -> int:
    """POST /benchmarks/{run_id}/cancel and say what it did (exit 1 when it had ended already)."""
    args.flags = {"path.run_id": "RUN_ID"}
    if not RUN_ID.match(args.run_id):
        print(f"servingctl runs: error: RUN_ID {args.run_id!r} is not a run id (like 20261203T090000Z-abc123)", file=sys.stderr)
        return EXIT_USAGE
    answer = client.post(f"/benchmarks/{args.run_id}/cancel")
    print(json.dumps(answer) if args.json else render.paragraph(answer["message"]))
    return EXIT_OK


def request_body(args: argparse.Namespace, client: Client) -> dict[str, Any]:
    """The run_benchmark input of `bench --profile` flags (the twin's poll pacing added when local).
    The run id is chosen here: a repeated POST of the same body names the same execution, which Step
    Functions returns instead of starting a second run."""
    run_id = f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"
    body: dict[str, Any] = {"profile": args.profile, "start": args.start, "stop": args.stop, "run_id": run_id}
    body |= {field: _as_json(getattr(args, flag)) for flag, field in FIELDS.items() if getattr(args, flag) is not None}
    if args.dataset and args.mode is None:
        body["mode"] = "sustained"  # as on this machine: every prompt once
    rounds, seconds = args.warmup  # --warmup: N rounds or Ss seconds
    body |= {"warmup": rounds} if seconds is None else {"warmup_s": seconds}
    if args.slo:
        body["slos"] = [slo.model_dump(exclude_none=True) for slo in args.slo]
    if args.sweep:
        body["sweep"] = True
    if args.label:
        body["label"] = args.label
    if client.poll:  # the twin runs AWS's delays faster: its flows should poll as fast
        body["start_options"] = {"poll": client.poll}
        body["stop_options"] = {"poll": client.poll}
    return body


def _as_json(value: Any) -> Any:
    """A flag's value as the API's JSON (a length distribution as its fields)."""
    return value.model_dump(exclude_none=True) if isinstance(value, BaseModel) else value


def upload_prompts(args: argparse.Namespace, client: Client, body: dict[str, Any]) -> bytes | None:
    """Read --dataset here (a malformed line stops it before anything is sent), describe the prompts
    taken in the body's dataset; returns the JSONL to upload (None without --dataset)."""
    from servingctl.loadgen.datasets import check_usable, load_dataset
    from servingctl.runs.matrix import BenchmarkInput
    from servingctl.runs.uploads import describe_upload, upload_payload
    from servingctl_cli.bench import dataset_spec

    spec = dataset_spec(args)
    if spec is None:
        return None
    dataset = load_dataset(spec)
    mode = body.get("mode", BenchmarkInput.model_fields["mode"].default)
    check_usable(dataset, api=body.get("api", "chat"), mode=mode, replay=body.get("replay_speed") is not None)
    payload = upload_payload(dataset)
    max_tokens = body.get("max_tokens", BenchmarkInput.model_fields["max_tokens"].default)
    body["dataset"] = describe_upload(dataset, payload, max_tokens).model_dump(mode="json")
    return payload


def put_prompts(client: Client, run_id: str, payload: bytes) -> None:
    """Upload a run's prompts: the API's presigned URL, then one PUT with the headers it was signed with."""
    import hashlib

    from servingctl.api.benchmarks import DatasetUpload

    answer = client.post(
        f"/benchmarks/{run_id}/dataset", {"size_bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}
    )
    upload = answer_as(DatasetUpload, answer, f"POST /benchmarks/{run_id}/dataset")
    try:
        response = httpx.put(upload.url, content=payload, headers=upload.headers, timeout=300)
    except httpx.HTTPError as exc:
        raise Unreachable(f"uploading the prompts to S3 failed: {exc}") from None
    if response.status_code != 200:
        raise ApiError(
            response.status_code, f"S3 refused the prompts' upload (HTTP {response.status_code}): {response.text[:300]}", None
        )


def follow_run(client: Client, run_id: str, *, plain: bool, sleep: Callable[[float], None] = time.sleep) -> BenchmarkDetail:
    """Poll GET /benchmarks/{run_id} until its execution ends, showing scenarios as they are written."""
    from servingctl.api.benchmarks import BenchmarkDetail

    console = Console(stderr=True)
    started = time.monotonic()
    shown: list[str] = []
    status = ""
    while True:
        path = f"/benchmarks/{run_id}"
        try:
            detail = answer_as(BenchmarkDetail, client.get(path), f"GET {path}")
        except ApiError as exc:
            if exc.status != 404 or time.monotonic() - started > 60:
                raise
            # The execution started but the run is not recorded yet.
            detail = BenchmarkDetail(run_id=run_id, profile="", status="PENDING", execution_status="RUNNING")
        elapsed = time.monotonic() - started
        for name in detail.scenarios_written[len(shown) :]:
            shown.append(name)
            _say(console, plain, f"[{elapsed:7.1f} s] {name} written ({len(shown)}/{len(detail.scenarios)})")
        if detail.status != status:
            status = detail.status
            _say(
                console,
                plain,
                f"[{elapsed:7.1f} s] {status}" + (" (the profile is being started)" if status == "PLANNED" else ""),
            )
        if detail.execution_status not in (None, "RUNNING"):
            return detail
        sleep(FOLLOW_INTERVAL_S)


def _say(console: Console, plain: bool, line: str) -> None:
    if plain:
        print(line, file=sys.stderr, flush=True)
    else:
        console.print(line, highlight=False)


def stored_run(client: Client, detail: BenchmarkDetail) -> tuple[RunResult, dict[str, Comparison]]:
    """The run's results with every scenario's records (downloaded through the presigned links)."""
    if detail.result is None:
        raise RunNotAvailable(f"{detail.run_id}: no results ({detail.status}: {detail.error or 'not recorded yet'})")
    run = detail.result
    # What was measured: shown beside a compared run.
    run.metadata.deployment = detail.reproducibility.model_dump(mode="json") if detail.reproducibility else None
    links = detail.records_urls
    with httpx.Client(timeout=60.0, trust_env=not client.local) as http:
        for scenario in run.scenarios:
            url = links.get(scenario.summary.name)
            if url:
                answer = http.get(url)
                answer.raise_for_status()
                scenario.records = decode_records(answer.content)
    return run, {c.scenario: c.comparison for c in detail.comparisons}


@dataclass
class LoadedRun:
    """A run for `report`: from a results file or from the API, with where its files go by default."""

    run: RunResult
    comparisons: dict[str, Comparison] | None
    directory: Path


def load_run(ref: str, args: argparse.Namespace) -> LoadedRun:
    """A results file or directory, or a run id fetched through the API (RunNotAvailable says why not;
    a bad file raises the outputs' ResultsFileError)."""
    # The outputs import matplotlib: only when a report is made, not for every servingctl command.
    from servingctl.loadgen.outputs.results_json import read_results, results_path

    if Path(ref).exists() or not RUN_ID.match(ref):
        return LoadedRun(read_results(ref), None, results_path(ref).parent)
    kept = RUNS_DIR / ref / "results.json"  # what `bench --profile` or an earlier `report` wrote here
    try:
        client = connect(args)
    except Unreachable as exc:
        if kept.exists():
            return _kept(ref, kept, str(exc))
        raise RunNotAvailable(f"{ref}: not a file, no copy in {kept.parent}, and no API to fetch the run from ({exc})") from None
    from servingctl.api.benchmarks import BenchmarkDetail

    path = f"/benchmarks/{ref}"
    try:
        run, comparisons = stored_run(client, answer_as(BenchmarkDetail, client.get(path), f"GET {path}"))
    except Unreachable as exc:
        if kept.exists():
            return _kept(ref, kept, str(exc))
        raise RunNotAvailable(f"{ref}: {exc}") from None
    except (ApiError, httpx.HTTPError) as exc:
        raise RunNotAvailable(f"{ref}: {exc}") from None
    finally:
        client.close()
    return LoadedRun(run, comparisons, RUNS_DIR / ref)


def _kept(ref: str, path: Path, why: str) -> LoadedRun:
    """The run's results as last written under servingctl-runs/ (the API is out of reach), said so."""
    from servingctl.loadgen.outputs.results_json import read_results

    print(f"servingctl: the API is out of reach ({why}); reporting {ref} from {path}", file=sys.stderr)
    return LoadedRun(read_results(str(path)), None, path.parent)


# run_benchmark input field -> the flag of `bench --profile`.
FLAGS = {field: "--" + flag.replace("_", "-") for flag, field in FIELDS.items()} | {
    "dataset": "--dataset",
    "profile": "--profile",
    "warmup": "--warmup",
    "warmup_s": "--warmup",
    "label": "--label",
    "start": "--start",
    "stop": "--stop",
    "slos": "--slo",
    "sweep": "--sweep",
}


def _remote(args: argparse.Namespace, client: Client) -> int:
    from pydantic import ValidationError

    from servingctl.runs.matrix import BenchmarkInput
    from servingctl.wording import for_flags

    body = request_body(args, client)
    try:
        payload = upload_prompts(args, client, body)
    except DatasetError as exc:
        print(f"servingctl bench: error: --dataset {args.dataset}: {exc} (nothing was sent)", file=sys.stderr)
        return EXIT_USAGE
    try:  # the API's own rules, checked before anything is sent: errors name the flags
        BenchmarkInput.model_validate(body)
    except ValidationError as exc:
        args.bench_parser.error(for_flags(exc.errors(), FLAGS))
    args.flags = {f"body.{field}": flag for field, flag in FLAGS.items()}  # the API's errors, named the same way
    from servingctl.api.benchmarks import BenchmarkRef

    if payload is not None:
        try:
            put_prompts(client, body["run_id"], payload)
        except KeyboardInterrupt:
            print(f"interrupted while uploading the prompts: no run was started on {args.profile}", file=sys.stderr)
            return EXIT_INTERRUPTED
    try:
        answer = client.post("/benchmarks", body)
    except KeyboardInterrupt:
        return unanswered(f"run {body['run_id']} of {args.profile}", f"servingctl wait {body['run_id']}")
    except ApiError as exc:
        if exc.field != "body.start":
            raise
        # The API says it in its input's words ("start": true); a person typed flags.
        raise ApiError(
            exc.status,
            exc.message.split(";")[0] + "; pass --start to start it first (and --stop to stop it afterwards)",
            exc.field,
        ) from None
    ref = answer_as(BenchmarkRef, answer, "POST /benchmarks")
    try:
        Console(stderr=True).print(
            f"run {ref.run_id}: "
            + (
                "a saturation sweep"
                if body.get("sweep")
                else f"{len(ref.scenarios)} scenario{'s' if len(ref.scenarios) != 1 else ''}"
            )
            + f" on {ref.profile}"
            + (" (starting it first)" if ref.start else "")
            + (", stopping it afterwards" if ref.stop else ""),
            highlight=False,
        )
        if args.no_wait:
            print(
                json.dumps(answer)
                if args.json
                else f"re-attach: servingctl wait {ref.run_id}; report: servingctl report {ref.run_id}"
            )
            return EXIT_OK
        return attach(args, client, ref.run_id, ref.profile)
    except KeyboardInterrupt:  # from the moment the API answered: attach says it itself once it follows
        return interrupted(client, "bench", ref.run_id, ref.profile)


def attach(args: argparse.Namespace, client: Client, run_id: str, profile: str) -> int:
    """Follow a run to its end, then print and write its results (Ctrl-C leaves it running, and says so)."""
    console = Console(stderr=True)
    try:
        detail = follow_run(client, run_id, plain=args.json or not console.is_terminal)
    except KeyboardInterrupt:
        return interrupted(client, "bench", run_id, profile)
    try:
        return _finished(args, client, console, detail)
    except KeyboardInterrupt:  # the run is over: only this copy of its results was cut short
        print(
            f"interrupted: run {run_id} had ended ({detail.status}); its results are stored, "
            f"write them again with: servingctl report {run_id}",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_INTERRUPTED


def _finished(args: argparse.Namespace, client: Client, console: Console, detail: BenchmarkDetail) -> int:
    """Print and write an ended run's results (exit 1 when it failed or a scenario failed too often)."""
    # The outputs import matplotlib (a second or two): only once a run has ended.
    from servingctl.loadgen.outputs import write_all
    from servingctl.loadgen.outputs.terminal import print_run, run_json

    run_id = detail.run_id
    if detail.result is None or not detail.result.scenarios:
        console.print(f"[bold red]run {run_id} {detail.status}[/]: {detail.error or 'no scenario written'}")
        if args.json:
            print(json.dumps({"run_id": run_id, "status": detail.status, "error": detail.error, "scenarios": []}))
        return EXIT_FAILED
    run, comparisons = stored_run(client, detail)
    # --json without --output writes nothing: a script asked for data, not for files in its directory.
    out = Path(args.output) if args.output else None if args.json else RUNS_DIR / run_id
    written = write_all(run, out, comparison=comparisons or None) if out is not None else []
    if args.json:
        print(
            json.dumps(
                run_json(run, comparisons=comparisons or None)
                | {"status": detail.status, "error": detail.error, "files": [str(p) for p in written]}
            )
        )
    else:
        print_run(run, comparisons=comparisons or None, api=priced_api(comparisons))
        if detail.status != "SUCCEEDED":
            console.print(f"[bold red]run {detail.status}[/]: {detail.error} (the scenarios above are stored)")
    if written:
        console.print(
            f"wrote {len(written)} files to {written[0].parent}: report.md, results.json, vllm/, *.png", highlight=False
        )
    return EXIT_OK if detail.status == "SUCCEEDED" and run.exit_code == 0 else EXIT_FAILED


remote_bench = api_command(_remote)
