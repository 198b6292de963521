"""`servingctl bench`: benchmark an OpenAI-compatible endpoint (sweep of input lengths x
concurrencies), print the reference's table, write the results directory."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from servingctl.loadgen import aio
from servingctl.loadgen.calibration import CalibrationError, EndpointUnreachable
from servingctl.loadgen.datasets import DatasetError
from servingctl.loadgen.lengths import SYNTAX, LengthError, parse_distribution
from servingctl.loadgen.measure import Progress as ProgressEvent
from servingctl.loadgen.measure import ProgressFn
from servingctl.loadgen.runner import run_benchmark
from servingctl.loadgen.saturation import run_sweep
from servingctl.loadgen.slo import SloError, parse_slos
from servingctl.loadgen.spread import MAX_PROCESSES
from servingctl.schema.results import (
    APIS,
    ARRIVALS,
    DATASET_FORMATS,
    MAX_WARMUP_S,
    MODES,
    OUTPUT_LENGTH_FROM,
    SALT_MODES,
    DatasetSpec,
    LengthDistribution,
    RunConfig,
    RunResult,
    Slo,
)
from servingctl_cli.client import EXIT_INTERRUPTED, add_api_arguments
from servingctl_cli.main import summary
from servingctl_cli.runs import remote_bench
from servingctl_cli.settings import API_KEY_ENV, CliSettings

# A rate sweep's cap on requests in flight when no --concurrency is given.
RATE_SWEEP_CAP = 64
# pydantic field -> the flag a user typed, so errors name what they can fix.
_FLAGS = {
    "endpoint": "--endpoint",
    "model": "--model",
    "api": "--api",
    "headers": "--header",
    "input_tokens": "--input-tokens",
    "concurrencies": "--concurrency",
    "mode": "--mode",
    "rate": "--rate",
    "rates": "--rate",
    "arrivals": "--arrivals",
    "warmup": "--warmup",
    "warmup_s": "--warmup",
    "rounds": "--rounds",
    "requests": "--requests",
    "duration_s": "--duration",
    "max_tokens": "--max-tokens",
    "seed": "--seed",
    "salt_mode": "--salt-mode",
    "max_failure_rate": "--max-failure-rate",
    "timeout_s": "--timeout",
    "slos": "--slo",
    "slo_share": "--slo-share",
    "sweep": "--sweep",
    "sweep_max_concurrency": "--sweep-max-concurrency",
    "sweep_max_steps": "--sweep-max-steps",
    "sweep_start_rate": "--sweep-start-rate",
    "sweep_max_rate": "--sweep-max-rate",
    "sweep_resolution": "--sweep-resolution",
    "dataset": "--dataset",
    "think_time_s": "--think-time",
    "replay_speed": "--replay",
    "input_distribution": "--input-dist",
    "output_distribution": "--output-dist",
}


def _int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated positive integers, e.g. 1,2,4")
    return values


def _bounded(kind: Callable[[str], float], low: float, high: float | None = None, what: str = "") -> Callable[[str], float]:
    # Not a number and out of range are refused in one form, as the list and header flags are.
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            value = math.nan
        if not low <= value <= (math.inf if high is None else high):  # also 'nan', which compares false
            raise argparse.ArgumentTypeError(f"{text!r}: expected {what}")
        return value

    return parse


def warmup_value(text: str) -> tuple[int, float | None]:
    """--warmup as (rounds, seconds): '2' is 2 warm-up rounds (0: none), '30s' is 30 s of warm-up load."""
    if text.isascii() and text.isdigit():
        return int(text), None
    try:
        seconds = float(text.removesuffix("s")) if text.endswith("s") else math.nan
    except ValueError:
        seconds = math.nan
    if 0 < seconds <= MAX_WARMUP_S:  # also refuses 'nan', which compares false
        return 0, seconds
    raise argparse.ArgumentTypeError(
        f"{text!r}: expected warm-up rounds (an integer >= 0, e.g. 2; 0: none) or seconds of warm-up load "
        f"(a number above 0 and at most {MAX_WARMUP_S:g} followed by s, e.g. 30s)"
    )


def _slos(text: str) -> list[Slo]:
    try:
        return parse_slos(text)
    except SloError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _rates(text: str) -> list[float]:
    parse = _bounded(float, 1e-9, what="comma-separated positive numbers of requests per second, e.g. 1,2,4")
    return [parse(part) for part in text.split(",")]


def _distribution(text: str) -> LengthDistribution:
    try:
        return parse_distribution(text)
    except LengthError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME:VALUE, e.g. X-LLM-Profile:deepseek-v4-flash")
    return name.strip(), value.strip()


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `bench` command."""
    p = subparsers.add_parser(
        "bench",
        help=summary("bench"),
        description="Sweep input lengths x concurrencies against an OpenAI-compatible chat endpoint.",
    )
    p.add_argument("--endpoint", help="server base URL (http://host:port, /v1 optional); required without --profile")
    p.add_argument("--model", help="served model name; required without --profile")
    p.add_argument(
        "--api-key", default=CliSettings.from_env().api_key, help=f"Bearer key (default: ${API_KEY_ENV}); never stored"
    )
    p.add_argument(
        "--header",
        type=_header,
        action="append",
        default=[],
        metavar="NAME:VALUE",
        help="extra header, repeatable (e.g. X-LLM-Profile:deepseek-v4-flash)",
    )
    p.add_argument(
        "--input-tokens",
        type=_int_list,
        default=[256, 2048, 8192],
        metavar="N,N,...",
        help="prompt lengths to calibrate (default 256,2048,8192)",
    )
    p.add_argument(
        "--concurrency",
        type=_int_list,
        metavar="C,C,...",
        help=f"concurrencies (rate mode: caps on requests in flight; default 1,2,4, a rate sweep's one cap {RATE_SWEEP_CAP})",
    )
    p.add_argument(
        "--api",
        choices=APIS,
        default="chat",
        help="chat: /v1/chat/completions (default); completions: /v1/completions, the prompt without a chat template",
    )
    p.add_argument("--mode", choices=MODES, help="load shape (default burst; sustained with --dataset)")
    p.add_argument(
        "--rate",
        "--request-rate",
        type=_rates,
        metavar="R,R,...",
        help="requests per second (mode rate); several make a sweep, one scenario per rate (e.g. 1,2,4,8)",
    )
    p.add_argument(
        "--arrivals",
        choices=ARRIVALS,
        default="poisson",
        help="mode rate: Poisson arrivals (seeded by --seed; default) or constant gaps of 1/rate",
    )
    p.add_argument(
        "--warmup",
        type=warmup_value,
        default=(2, None),
        metavar="N|Ss",
        help="warm-up before measuring: N rounds of C requests (default 2; 0: none) or, with an s, seconds of the "
        f"scenario's own load (e.g. 30s, at most {MAX_WARMUP_S:g}s); warm-up requests are never measured",
    )
    p.add_argument("--rounds", type=_bounded(int, 1, what="an integer >= 1"), default=5, help="measured burst rounds (default 5)")
    p.add_argument("--requests", type=_bounded(int, 1, what="an integer >= 1"), help="measured requests (sustained, rate)")
    p.add_argument(
        "--duration",
        type=_bounded(float, 1e-9, what="a positive number of seconds"),
        help="stop sending after this many seconds (sustained, rate)",
    )
    p.add_argument(
        "--max-tokens", type=_bounded(int, 1, what="an integer >= 1"), default=256, help="output tokens per request (default 256)"
    )
    p.add_argument("--seed", type=int, default=42, help="sampling seed and Poisson schedule seed (default 42)")
    p.add_argument(
        "--salt-mode",
        choices=SALT_MODES,
        default="cache-salt",
        help="defeat prefix caching per request: cache_salt field, random prompt prefix, or none",
    )
    p.add_argument(
        "--max-failure-rate",
        type=_bounded(float, 0.0, 1.0, "a number from 0 to 1"),
        default=0.0,
        help="exit non-zero when a scenario's failure rate exceeds this (default 0)",
    )
    p.add_argument(
        "--timeout",
        type=_bounded(float, 1e-9, what="a positive number of seconds"),
        default=600.0,
        help="per-request timeout in seconds (default 600)",
    )
    own = p.add_argument_group("your own prompts, or lengths that vary per request")
    own.add_argument(
        "--dataset",
        metavar="FILE",
        help="send this file's prompts instead of synthetic ones: ShareGPT JSON, JSONL or CSV (README, "
        "'Benchmark your own prompts'); every prompt once, --concurrency in flight, unless --requests or --duration",
    )
    own.add_argument("--dataset-format", choices=DATASET_FORMATS, help="the file's format (default: detected from its content)")
    own.add_argument("--num-prompts", type=_bounded(int, 1, what="an integer >= 1"), help="take the first N prompts of the file")
    own.add_argument(
        "--dataset-output-tokens",
        choices=OUTPUT_LENGTH_FROM,
        default="max-tokens",
        help="output length of each request: --max-tokens (default), or the dataset's (ShareGPT: the reference "
        "answer's tokens; JSONL/CSV: output_tokens, --max-tokens where a line has none)",
    )
    own.add_argument(
        "--multi-turn",
        action="store_true",
        help="ShareGPT: send every user turn of an entry as one conversation, the history (the server's own "
        "replies) carried; JSONL/CSV lines with a conversation_id are conversations without this flag",
    )
    own.add_argument(
        "--think-time",
        type=_bounded(float, 0.0, 3600.0, "seconds from 0 to 3600"),
        default=0.0,
        help="conversations: seconds between a reply and the next turn (default 0)",
    )
    own.add_argument(
        "--replay",
        type=_bounded(float, 1e-9, 1000.0, "a speed-up above 0 and at most 1000"),
        nargs="?",
        const=1.0,
        metavar="SPEED",
        help="send the dataset's requests at its timestamps (seconds), divided by SPEED (default 1: real time); "
        "--concurrency then caps requests in flight",
    )
    own.add_argument(
        "--input-dist",
        type=_distribution,
        metavar="SPEC",
        help=f"prompt lengths drawn per request instead of --input-tokens: {SYNTAX}",
    )
    own.add_argument(
        "--output-dist",
        type=_distribution,
        metavar="SPEC",
        help="output lengths drawn per request instead of --max-tokens (same forms); each still exact (ignore_eos)",
    )
    slo = p.add_argument_group("service-level objectives and the saturation sweep")
    slo.add_argument(
        "--slo",
        type=_slos,
        default=[],
        metavar="METRIC[:PCT]=LIMIT,...",
        help="latency objectives, e.g. ttft_ms=500,itl_ms=50,e2e_s=20 (each request) or ttft_ms:p90=500 "
        "(the scenario's p90; p50, p90, p95, p99); goodput counts requests meeting every per-request SLO",
    )
    slo.add_argument(
        "--slo-share",
        type=_bounded(float, 1e-9, 1.0, "a number above 0 and at most 1"),
        default=1.0,
        help="share of requests that must meet every per-request SLO (default 1)",
    )
    slo.add_argument(
        "--sweep",
        action="store_true",
        help="search the highest concurrency meeting the SLOs (doubling from 1, then bisection; stops "
        "once over-saturated) instead of the --concurrency grid; with --mode rate the highest arrival rate "
        "(req/s) instead; needs --slo and one --input-tokens",
    )
    slo.add_argument(
        "--sweep-max-concurrency",
        type=_bounded(int, 1, 4096, "an integer from 1 to 4096"),
        default=256,
        help="highest concurrency the sweep tries (default 256)",
    )
    slo.add_argument(
        "--sweep-max-steps",
        type=_bounded(int, 2, 40, "an integer from 2 to 40"),
        default=12,
        help="most scenarios the sweep runs (default 12)",
    )
    slo.add_argument(
        "--sweep-start-rate",
        type=_bounded(float, 1e-9, 10_000, "requests per second above 0 and at most 10000"),
        help="--sweep --mode rate: the first rate tried, then doubled (default 1 req/s)",
    )
    slo.add_argument(
        "--sweep-max-rate",
        type=_bounded(float, 1e-9, 10_000, "requests per second above 0 and at most 10000"),
        help="--sweep --mode rate: the highest rate tried (default 1000 req/s)",
    )
    slo.add_argument(
        "--sweep-resolution",
        type=_bounded(float, 0.01, 1.0, "a fraction from 0.01 to 1"),
        help="--sweep --mode rate: bisect until the rate missed is within this fraction of the rate met (default 0.1)",
    )
    p.add_argument(
        "--processes",
        type=_bounded(int, 1, MAX_PROCESSES, f"an integer from 1 to {MAX_PROCESSES}"),
        default=1,
        help="spread each scenario's streams over this many processes of this machine, merged on its "
        "monotonic clock, when one event loop cannot keep up (burst and sustained; default 1)",
    )
    p.add_argument("--output", metavar="DIR", help="write results.json, vllm/*.json, report.md and charts here")
    p.add_argument("--json", action="store_true", help="print the headline rows as JSON instead of a table")
    remote = p.add_argument_group("a deployed profile, measured from inside its VPC (run_benchmark through the REST API)")
    remote.add_argument("--profile", help="benchmark this registry profile instead of --endpoint/--model")
    remote.add_argument("--start", action="store_true", help="start the profile first when it is not READY")
    remote.add_argument("--stop", action="store_true", help="stop the profile when the run ends (also after a failure)")
    remote.add_argument("--label", help="a note stored with the run, e.g. 'MTP on'")
    remote.add_argument(
        "--max-workers",
        type=_bounded(int, 1, 8, "an integer from 1 to 8"),
        help="workers a client-bound scenario may be split across (default 4; 1 never splits)",
    )
    remote.add_argument("--no-wait", action="store_true", help="return once the run started")
    add_api_arguments(p, json_flag=False)
    p.set_defaults(func=_bench, bench_parser=p)


def dataset_spec(args: argparse.Namespace) -> DatasetSpec | None:
    """The --dataset flags as a DatasetSpec (None without --dataset)."""
    if not args.dataset:
        return None
    return DatasetSpec(
        source=args.dataset,
        format=args.dataset_format,
        num_prompts=args.num_prompts,
        output_tokens=args.dataset_output_tokens,
        multi_turn=args.multi_turn,
    )


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The RunConfig of parsed flags (raises ValidationError; header values redacted inside)."""
    dataset = dataset_spec(args)
    rate_sweep = {
        field: value
        for field in ("sweep_start_rate", "sweep_max_rate", "sweep_resolution")
        if (value := getattr(args, field)) is not None
    }
    concurrencies = args.concurrency or ([RATE_SWEEP_CAP] if args.sweep and args.mode == "rate" else [1, 2, 4])
    return RunConfig(
        endpoint=args.endpoint,
        model=args.model,
        api=args.api,
        headers=dict(args.header),
        api_key_set=bool(args.api_key),
        input_tokens=args.input_tokens,
        concurrencies=concurrencies,
        mode=args.mode or ("sustained" if dataset else "burst"),
        rate=args.rate[0] if args.rate and len(args.rate) == 1 else None,
        rates=args.rate if args.rate and len(args.rate) > 1 else None,
        arrivals=args.arrivals,
        warmup=args.warmup[0],
        warmup_s=args.warmup[1],
        rounds=args.rounds,
        requests=args.requests,
        duration_s=args.duration,
        max_tokens=args.max_tokens,
        dataset=dataset,
        input_distribution=args.input_dist,
        output_distribution=args.output_dist,
        think_time_s=args.think_time,
        replay_speed=args.replay,
        seed=args.seed,
        salt_mode=args.salt_mode,
        max_failure_rate=args.max_failure_rate,
        timeout_s=args.timeout,
        slos=args.slo,
        slo_share=args.slo_share,
        sweep=args.sweep,
        sweep_max_concurrency=args.sweep_max_concurrency,
        sweep_max_steps=args.sweep_max_steps,
        **rate_sweep,
    )


def _validation_message(exc: ValidationError) -> str:
    from servingctl.wording import for_flags

    return for_flags(exc.errors(), _FLAGS)


def _bench(args: argparse.Namespace) -> int:
    # The outputs import matplotlib (about 2 s): load them only when a benchmark runs, not for
    # every `servingctl` command (main builds the parser from every cli module).
    from servingctl.loadgen.outputs import write_all

    dataset_only = args.dataset_format or args.num_prompts or args.dataset_output_tokens != "max-tokens" or args.multi_turn
    if not args.dataset and (dataset_only or args.replay is not None or args.think_time):
        args.bench_parser.error(
            "--dataset-format, --num-prompts, --dataset-output-tokens, --multi-turn, --think-time, --replay: "
            "only with --dataset FILE"
        )
    rate_sweep_only = [f for f in ("sweep_start_rate", "sweep_max_rate", "sweep_resolution") if getattr(args, f) is not None]
    if rate_sweep_only and not (args.sweep and args.mode == "rate"):
        args.bench_parser.error(
            f"{', '.join(_FLAGS[f] for f in rate_sweep_only)}: only for a rate sweep (--sweep --mode rate); "
            f"got {'--sweep with --mode ' + (args.mode or 'burst') if args.sweep else 'no --sweep'}"
        )
    if args.profile and args.sweep and args.mode == "rate":
        args.bench_parser.error(
            "--sweep --mode rate: not for a --profile run inside the VPC (its sweep varies concurrency: --mode burst "
            "or sustained); run the rate sweep from this machine with --endpoint and --model"
        )
    if args.profile:
        if args.endpoint or args.model or args.header or args.api_key:
            args.bench_parser.error(
                "--profile: the run targets the profile's own endpoint; drop --endpoint, --model, --header, --api-key"
            )
        if args.processes > 1:
            args.bench_parser.error(
                "--processes: a --profile run is spread across its in-VPC workers (--max-workers), "
                "not processes of this machine; allowed value with --profile: 1"
            )
        return remote_bench(args)
    if not args.endpoint or not args.model:
        args.bench_parser.error("--endpoint and --model are required (or --profile NAME to benchmark a deployed profile)")
    try:
        config = config_from_args(args)
    except ValidationError as exc:
        args.bench_parser.error(_validation_message(exc))
    if args.processes > 1 and config.mode == "rate":
        args.bench_parser.error(
            "--processes: rate mode runs in one process (its Poisson schedule would change if "
            f"spread); allowed values: 1 with --mode rate, 1 to {MAX_PROCESSES} with --mode burst or sustained"
        )
    console = Console(stderr=True)
    try:
        with _progress(console) as progress:
            measure = run_sweep if config.sweep else run_benchmark
            run = aio.run(
                measure(config, api_key=args.api_key, headers=dict(args.header), progress=progress, processes=args.processes)
            )
    except EndpointUnreachable as exc:
        print(f"servingctl bench: error: {exc}", file=sys.stderr)
        return 1
    except DatasetError as exc:
        print(f"servingctl bench: error: --dataset {args.dataset}: {exc} (nothing was sent)", file=sys.stderr)
        return 2
    except CalibrationError as exc:
        console.print(f"[bold red]servingctl bench: calibration failed:[/] {exc}", highlight=False)
        return 1
    except KeyboardInterrupt:
        # Nothing goes on elsewhere: the requests were this process's own.
        console.print(
            f"interrupted: nothing written, nothing left running (the benchmark ran from this machine against {config.endpoint})",
            highlight=False,
            soft_wrap=True,
        )
        return EXIT_INTERRUPTED
    written = write_all(run, args.output) if args.output else []
    _print_results(run, as_json=args.json)
    for path in written[:1]:
        console.print(f"results written to {path.parent} ({len(written)} files)")
    return run.exit_code


@contextmanager
def _progress(console: Console) -> Iterator[ProgressFn]:
    """A rich progress bar per scenario on a terminal; plain lines otherwise."""
    if not console.is_terminal:

        def plain(event: ProgressEvent) -> None:
            if event.kind != "request_done":
                print(f"[{event.kind}] {event.scenario or ''} {event.message}".replace("  ", " "), file=sys.stderr, flush=True)

        yield plain
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as bar:
        tasks: dict[str, TaskID] = {}

        def rich_event(event: ProgressEvent) -> None:
            if event.kind == "calibrated":
                console.print(f"calibrated {event.message}")
            elif event.kind == "scenario_started" and event.scenario:
                tasks[event.scenario] = bar.add_task(event.scenario, total=event.total)
            elif event.scenario in tasks:
                bar.update(
                    tasks[event.scenario],
                    completed=event.done,
                    description=f"{event.scenario} {event.message}" if event.kind == "scenario_finished" else event.scenario,
                )

        yield rich_event


def _print_results(run: RunResult, *, as_json: bool) -> None:
    """The same table, closing lines and JSON as `bench --profile` and `report` (bench.outputs.terminal)."""
    from servingctl.loadgen.outputs.terminal import print_run, run_json

    if as_json:
        print(json.dumps(run_json(run), indent=1))
    else:
        print_run(run)
