"""`servingctl costs`: compare self-hosted cost per token with a managed API; list the price catalog."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from servingctl.costs import CatalogError, CompareInput, compare, load_catalog, slo_cost_of
from servingctl.costs.simulate import (
    MODELED_START_S,
    MODELED_STOP_S,
    SIMULATE_PNG,
    SWEEP_MINUTES,
    Settings,
    Simulation,
    StartModel,
    default_span,
    parse_schedule,
    simulate,
)
from servingctl.costs.trace import FORMATS, AlbTokens, TraceError, read_trace
from servingctl.schema.comparison import DayUse, SloCostInput
from servingctl.wording import for_flags
from servingctl_cli.client import Client, add_api_arguments, add_output_argument, api_command
from servingctl_cli.main import summary
from servingctl_cli.settings import add_prices_argument

if TYPE_CHECKING:
    from servingctl.api.models import WarmPoolCost

# pydantic field -> the flag a user typed, so errors name what they can fix.
_FLAGS = {
    "output_tok_s": "--output-tok-s",
    "input_tokens": "--input-tokens",
    "output_tokens": "--output-tokens",
    "api_input_usd_per_m": "--api-input-usd-per-m",
    "api_output_usd_per_m": "--api-output-usd-per-m",
    "hours": "--hours",
    "self_hosted_monthly_usd": "--self-hosted-monthly-usd",
    "hourly_usd": "--hourly-usd",
    "standing_monthly_usd": "--standing-monthly-usd",
}
# The flag's old name, still accepted (deprecated): the figure is the results' output_tok_s now.
OLD_OUTPUT_TOK_S_FLAG = "--aggregate-tok-s"
# Unit of a monthly infrastructure price, by the part of its key before "-month".
MONTHLY_UNITS = {"gb": "GB", "mibps": "MiB/s", "iops": "IOPS"}


class _OldFlagWarns(argparse.Action):
    """Stores the value; typed under the old flag name, says so on stderr with the new name."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: str | None = None
    ) -> None:
        """Store ``values`` under ``dest``; warn when ``option_string`` is the deprecated name."""
        if option_string == OLD_OUTPUT_TOK_S_FLAG:
            print(f"servingctl costs: {OLD_OUTPUT_TOK_S_FLAG} is deprecated: use --output-tok-s", file=sys.stderr)
        setattr(namespace, self.dest, values)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `costs` command group."""
    costs = subparsers.add_parser("costs", help=summary("costs"))
    sub = costs.add_subparsers(dest="costs_command", metavar="SUBCOMMAND", required=True)

    cmp = sub.add_parser("compare", help="monthly cost of measured throughput, self-hosted vs managed API")
    price = cmp.add_mutually_exclusive_group(required=True)
    price.add_argument("--self-hosted-monthly-usd", type=float, help="all-in monthly self-hosted cost")
    price.add_argument("--hourly-usd", type=float, help="all-in self-hosted cost per running hour")
    cmp.add_argument(
        "--output-tok-s",
        OLD_OUTPUT_TOK_S_FLAG,
        dest="output_tok_s",
        type=float,
        required=True,
        action=_OldFlagWarns,
        help=f"measured output tok/s: a benchmark's output_tok_s ({OLD_OUTPUT_TOK_S_FLAG}: its old name, deprecated)",
    )
    cmp.add_argument("--input-tokens", type=int, required=True, help="input tokens per request")
    cmp.add_argument("--output-tokens", type=int, required=True, help="output tokens per request")
    cmp.add_argument("--api", help="managed API from the price catalog (default: the catalog's default)")
    cmp.add_argument("--api-input-usd-per-m", type=float, help="overrides the catalog's input price")
    cmp.add_argument("--api-output-usd-per-m", type=float, help="overrides the catalog's output price")
    cmp.add_argument("--hours", type=float, default=730, help="hours a month the server runs (default 730)")
    cmp.add_argument(
        "--standing-monthly-usd",
        type=float,
        default=0.0,
        help="costs that run all month whatever --hours is, e.g. the warm pool's volumes (`costs ledger` shows them)",
    )
    add_prices_argument(cmp)
    cmp.add_argument("--json", action="store_true", help="machine-readable output")
    add_output_argument(cmp)
    cmp.set_defaults(func=_compare)

    at = sub.add_parser("slo", help="cost per 1M output tokens at the SLO from goodput, cold starts and idle time amortized")
    at.add_argument("--goodput-rps", type=float, required=True, help="requests/s meeting the SLO (a sweep's goodput)")
    at.add_argument("--goodput-tok-s", type=float, required=True, help="their output tokens/s")
    at.add_argument("--input-tokens", type=int, required=True, help="input tokens per request")
    at.add_argument("--hourly-usd", type=float, required=True, help="all-in self-hosted cost per running hour")
    at.add_argument(
        "--running-hours", type=float, default=24.0, help="instance hours a day, cold starts and idle included (default 24)"
    )
    at.add_argument("--starts", type=float, default=1.0, help="starts a day (default 1)")
    at.add_argument("--cold-start-s", type=float, default=0.0, help="seconds from a start's request to READY (default 0)")
    at.add_argument("--idle-minutes", type=float, default=0.0, help="idle window paid before each idle stop (default 0)")
    at.add_argument("--api", help="managed API from the price catalog (default: the catalog's default)")
    at.add_argument("--api-input-usd-per-m", type=float, help="overrides the catalog's input price")
    at.add_argument("--api-output-usd-per-m", type=float, help="overrides the catalog's output price")
    add_prices_argument(at)
    at.add_argument("--json", action="store_true", help="machine-readable output")
    add_output_argument(at)
    at.set_defaults(func=_slo)

    sim = sub.add_parser(
        "simulate",
        help="replay a traffic trace against always on, schedule, idle auto-stop, wake on request and the managed API",
    )
    sim.add_argument(
        "--trace", required=True, help="requests: CSV or JSONL (timestamp, input_tokens, output_tokens), or ALB access logs"
    )
    sim.add_argument("--format", choices=FORMATS, help="the trace's format (default: from its suffix: .csv, .jsonl, .log[.gz])")
    sim.add_argument(
        "--alb-tokens",
        choices=("fixed", "bytes"),
        default="fixed",
        help="ALB logs carry no tokens: fixed counts per request (default), or received/sent bytes per token",
    )
    sim.add_argument("--alb-input-tokens", type=int, default=1000, help="fixed: input tokens per request (default 1000)")
    sim.add_argument("--alb-output-tokens", type=int, default=256, help="fixed: output tokens per request (default 256)")
    sim.add_argument("--alb-bytes-per-token", type=float, default=4.0, help="bytes: bytes per token (default 4)")
    sim.add_argument("--hourly-usd", type=float, help="cost per running hour (default: the catalog's --instance-type)")
    sim.add_argument("--instance-type", default="g7e.12xlarge", help="priced from the catalog (default g7e.12xlarge)")
    sim.add_argument("--catalog-region", default="us-east-1", help="the catalog region of --instance-type (default us-east-1)")
    sim.add_argument("--idle-minutes", type=float, default=30.0, help="idle window of the idle and wake policies (default 30)")
    sim.add_argument("--sweep-minutes", type=float, default=SWEEP_MINUTES, help=f"the sweep's period (default {SWEEP_MINUTES})")
    sim.add_argument(
        "--schedule",
        default="mon-fri 08:00-18:00 UTC",
        help="the schedule policy's periods: DAYS HH:MM-HH:MM [ZONE] (default 'mon-fri 08:00-18:00 UTC')",
    )
    starts = sim.add_mutually_exclusive_group()
    starts.add_argument(
        "--start-s", type=float, help=f"seconds from a start's request to READY (default {MODELED_START_S:.0f}, modeled)"
    )
    starts.add_argument("--start-history", help="`servingctl starts NAME --json` output: start times drawn from its READY starts")
    starts.add_argument("--profile", help="draw start times from this profile's recorded starts (asks the API)")
    sim.add_argument(
        "--stop-s",
        type=float,
        default=MODELED_STOP_S,
        help=f"seconds from a stop to the instance gone (default {MODELED_STOP_S:.0f})",
    )
    sim.add_argument("--seed", type=int, default=0, help="seed of the start-time draws (default 0)")
    sim.add_argument(
        "--days",
        type=float,
        help="the span to price, from the first request's UTC day (default: the whole days the trace touches)",
    )
    sim.add_argument("--chart", help=f"write the chart here (default {SIMULATE_PNG}; 'none' for no chart)", default=SIMULATE_PNG)
    sim.add_argument("--api", help="managed API from the price catalog (default: the catalog's default)")
    sim.add_argument("--api-input-usd-per-m", type=float, help="overrides the catalog's input price")
    sim.add_argument("--api-output-usd-per-m", type=float, help="overrides the catalog's output price")
    sim.add_argument("--prices", help="price file overriding the packaged catalog")
    add_api_arguments(sim)
    sim.set_defaults(func=_simulate)

    prices = sub.add_parser("prices", help="show the price catalog with sources and dates")
    add_prices_argument(prices)
    prices.add_argument("--json", action="store_true", help="machine-readable output")
    add_output_argument(prices)
    prices.set_defaults(func=_prices)

    ledger = sub.add_parser("ledger", help="what every session cost (uptime x hourly price), and per profile per month")
    ledger.add_argument("--profile", help="only this serving profile")
    add_api_arguments(ledger)
    ledger.set_defaults(func=api_command(_ledger))

    idle = sub.add_parser("idle", help="what the stack costs a month while nothing runs: NAT or endpoints, ALB, warm volumes")
    where = idle.add_mutually_exclusive_group()
    where.add_argument(
        "--egress", choices=("nat", "endpoints"), help="the network option to price (default: read from --terraform-dir)"
    )
    where.add_argument(
        "--terraform-dir",
        metavar="DIR",
        help="infra/terraform as deployed: its `egress` output says which option runs (terraform output)",
    )
    idle.add_argument("--prices", help="price file overriding the packaged catalog")
    add_api_arguments(idle)
    idle.set_defaults(func=_idle)


def _error(message: str) -> int:
    print(f"servingctl costs: error: {message}", file=sys.stderr)
    return 2


def _compare(args: argparse.Namespace) -> int:
    try:
        api_in, api_out = _api_prices(args)
    except CatalogError as exc:
        return _error(f"--prices: {exc}")
    except KeyError as exc:
        return _error(f"--api: {exc.args[0]}")
    try:
        # Validated as given (an API price still None is refused naming its flag).
        inputs = CompareInput.model_validate(
            {
                "output_tok_s": args.output_tok_s,
                "input_tokens": args.input_tokens,
                "output_tokens": args.output_tokens,
                "api_input_usd_per_m": api_in,
                "api_output_usd_per_m": api_out,
                "hours": args.hours,
                "self_hosted_monthly_usd": args.self_hosted_monthly_usd,
                "hourly_usd": args.hourly_usd,
                "standing_monthly_usd": args.standing_monthly_usd,
            }
        )
    except ValidationError as exc:
        return _error(for_flags(exc.errors(), _FLAGS))
    result = compare(inputs)
    if args.json:
        print(json.dumps(result.model_dump(mode="json") | {"breaks_even": result.breaks_even}, indent=2))
        return 0
    table = Table(title="Self-hosted vs managed API (per month)", show_header=True)
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows = [
        ("output tokens / month", f"{result.output_tokens_per_month / 1e6:,.1f} M"),
        ("input tokens / month", f"{result.input_tokens_per_month / 1e6:,.1f} M"),
        (
            "self-hosted cost",
            f"{result.self_hosted_monthly_usd:,.0f} USD"
            + (f" (of which {inputs.standing_monthly_usd:,.0f} standing)" if inputs.standing_monthly_usd else ""),
        ),
        ("managed API cost", f"{result.api_monthly_usd:,.0f} USD"),
        ("self-hosted / API", f"{result.ratio_self_hosted_to_api:.2f}"),
        ("self-hosted USD per 1M output tokens", f"{result.self_hosted_usd_per_m_output:.2f}"),
        ("API USD per 1M output tokens (same requests)", f"{result.api_usd_per_m_output:.2f}"),
        ("break-even utilization", f"{result.break_even_utilization:.0%}" if result.breaks_even else "never"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    Console().print(table)
    from servingctl import render

    print(render.note("Break-even: " + result.break_even_words() + "."))
    return 0


def _api_prices(args: argparse.Namespace) -> tuple[float | None, float | None]:
    """The managed API's input and output prices per 1M: the flags, else the catalog's API (CatalogError, KeyError)."""
    catalog = load_catalog(args.prices)
    api = catalog.managed_api(args.api) if args.api or catalog.default_managed_api else None
    api_in = args.api_input_usd_per_m if args.api_input_usd_per_m is not None else (api.input_usd_per_m if api else None)
    api_out = args.api_output_usd_per_m if args.api_output_usd_per_m is not None else (api.output_usd_per_m if api else None)
    return api_in, api_out


_SLO_FLAGS = {
    "running_hours": "--running-hours",
    "starts": "--starts",
    "cold_start_s": "--cold-start-s",
    "idle_minutes": "--idle-minutes",
    "goodput_rps": "--goodput-rps",
    "goodput_tok_s": "--goodput-tok-s",
    "input_tokens": "--input-tokens",
    "hourly_usd": "--hourly-usd",
    "api_input_usd_per_m": "--api-input-usd-per-m",
    "api_output_usd_per_m": "--api-output-usd-per-m",
}


def _slo(args: argparse.Namespace) -> int:
    from servingctl import render

    try:
        api_in, api_out = _api_prices(args)
    except CatalogError as exc:
        return _error(f"--prices: {exc}")
    except KeyError as exc:
        return _error(f"--api: {exc.args[0]}")
    errors: list[Any] = []
    built: list[Any] = []
    for model, fields in (
        (
            DayUse,
            {
                "running_hours": args.running_hours,
                "starts": args.starts,
                "cold_start_s": args.cold_start_s,
                "idle_minutes": args.idle_minutes,
                "source": "as given",
            },
        ),
        (
            SloCostInput,
            {
                "goodput_rps": args.goodput_rps,
                "goodput_tok_s": args.goodput_tok_s,
                "input_tokens": args.input_tokens,
                "hourly_usd": args.hourly_usd,
                "api_input_usd_per_m": api_in,
                "api_output_usd_per_m": api_out,
            },
        ),
    ):
        try:  # both models checked, so every bad flag is named at once
            built.append(model.model_validate(fields))
        except ValidationError as exc:
            errors += exc.errors()
    if errors:
        return _error(for_flags(errors, _SLO_FLAGS))
    day, inputs = built
    cost = slo_cost_of(inputs, day)
    if args.json:
        print(json.dumps(cost.model_dump(mode="json") | {"breaks_even": cost.breaks_even}, indent=2))
        return 0
    print(render.note("Cost at the SLO: " + cost.words() + "."))
    return 0


def _simulate(args: argparse.Namespace) -> int:
    """Replay the trace; with --profile the start history comes from the API first."""
    if args.profile:
        return api_command(_simulate_with_profile)(args)
    return _simulate_with(args, None)


def _simulate_with_profile(args: argparse.Namespace, client: Client) -> int:
    history = client.get(f"/profiles/{args.profile}/starts", {"limit": 100})
    return _simulate_with(args, _ready_seconds(history, f"--profile {args.profile}"))


def _ready_seconds(history: Any, where: str) -> tuple[float, ...]:
    """Request-to-READY seconds of the READY starts of a start history (GET /profiles/NAME/starts)."""
    from datetime import datetime

    if not isinstance(history, dict) or not isinstance(history.get("starts"), list):
        raise TraceError(f"{where}: not a start history (the output of `servingctl starts NAME --json`)")
    seconds = []
    for start in history["starts"]:
        if start.get("outcome") == "READY" and start.get("ended_at"):
            ended, requested = datetime.fromisoformat(start["ended_at"]), datetime.fromisoformat(start["requested_at"])
            seconds.append((ended - requested).total_seconds())
    return tuple(seconds)


def _simulate_with(args: argparse.Namespace, recorded: tuple[float, ...] | None) -> int:
    from datetime import timedelta

    from servingctl import render

    try:
        api_in, api_out = _api_prices(args)
        catalog = load_catalog(args.prices)
    except CatalogError as exc:
        return _error(f"--prices: {exc}")
    except KeyError as exc:
        return _error(f"--api: {exc.args[0]}")
    hourly = args.hourly_usd
    if hourly is None:
        price = catalog.instance(args.catalog_region, args.instance_type)
        if price is None:
            key = f"{args.catalog_region}/{args.instance_type}"
            return _error(f"--instance-type: no price for {key} in the catalog; give --hourly-usd")
        hourly = price.hourly_usd
    if api_in is None or api_out is None or min(hourly, api_in, api_out) < 0:
        return _error("--hourly-usd, --api-input-usd-per-m, --api-output-usd-per-m: must be prices of 0 or more")
    for flag, value in (
        ("--idle-minutes", args.idle_minutes),
        ("--sweep-minutes", args.sweep_minutes),
        ("--start-s", args.start_s),
        ("--days", args.days),
        ("--alb-bytes-per-token", args.alb_bytes_per_token),
    ):
        if value is not None and value <= 0:
            return _error(f"{flag}: must be greater than 0")
    for flag, value in (
        ("--stop-s", args.stop_s),
        ("--alb-input-tokens", args.alb_input_tokens),
        ("--alb-output-tokens", args.alb_output_tokens),
    ):
        if value < 0:
            return _error(f"{flag}: must be 0 or more")
    try:
        schedule = parse_schedule(args.schedule)
    except ValueError as exc:
        return _error(f"--schedule: {exc}")
    try:
        history = recorded
        if args.start_history:
            history = _ready_seconds(json.loads(Path(args.start_history).read_text()), args.start_history)
        trace = read_trace(
            args.trace,
            args.format,
            AlbTokens(args.alb_tokens, args.alb_input_tokens, args.alb_output_tokens, args.alb_bytes_per_token),
        )
    except (OSError, json.JSONDecodeError) as exc:
        return _error(f"--start-history: {exc}")
    except TraceError as exc:
        return _error(str(exc))
    requests = list(trace.requests)
    start = StartModel(history_s=history or (), modeled_s=args.start_s or MODELED_START_S, seed=args.seed)
    span = None
    if args.days is not None:
        first = default_span(requests)[0]
        span = (first, first + timedelta(days=args.days))
        if requests[-1].at >= span[1]:
            return _error(
                f"--days: the trace's last request ({requests[-1].at.isoformat()}) is past {args.days:g} days from {first.date()}"
            )
    result = simulate(
        requests,
        Settings(
            hourly_usd=hourly,
            api_input_usd_per_m=api_in,
            api_output_usd_per_m=api_out,
            idle_minutes=args.idle_minutes,
            sweep_s=args.sweep_minutes * 60,
            stop_s=args.stop_s,
            start=start,
            schedule=schedule,
            span=span,
        ),
    )
    chart = None
    if args.chart != "none":
        from servingctl.costs.chart import write_simulation_chart

        chart = str(write_simulation_chart(result, requests, args.chart))
    if args.json:
        print(json.dumps(result.model_dump(mode="json") | {"skipped_alb_entries": trace.skipped, "chart": chart}, indent=2))
        return 0
    _print_simulation(result, trace.skipped)
    if history == ():
        print(render.note("No READY start in the history: start times are the modeled ones."))
    if chart:
        print(f"chart: {chart}")
    return 0


def _print_simulation(result: Simulation, skipped: int) -> None:
    from servingctl import render

    rows = [
        (
            p.policy,
            f"{p.gpu_hours:,.1f}",
            f"{p.monthly_usd:,.2f}",
            f"{p.ratio_to_api:,.1f}" if p.ratio_to_api is not None else "-",
            str(p.starts),
            str(p.stops),
            str(p.waited),
            f"{p.wait_p50_s:.0f} / {p.wait_p95_s:.0f}" if p.wait_p50_s is not None and p.wait_p95_s is not None else "-",
            str(p.unserved),
        )
        for p in result.policies
    ]
    print(render.note("What this traffic costs under each policy (per month)"))
    print(
        render.table(
            ("policy", "GPU h\n(span)", "USD /\nmonth", "x API", "starts", "stops", "waited", "wait s\np50 / p95", "not\nserved"),
            rows,
            right=(1, 2, 3, 4, 5, 6, 7, 8),
        )
    )
    print(
        render.note(
            f"{result.requests:,} requests ({result.input_tokens:,} input, {result.output_tokens:,} output tokens) from "
            f"{result.span_start:%Y-%m-%d} to {result.span_end:%Y-%m-%d} ({result.span_hours / 24:.1f} days, "
            f"scaled to a month of 730 h); GPU at {result.hourly_usd} USD/h, "
            f"API at {result.api_input_usd_per_m} / {result.api_output_usd_per_m} USD "
            f"per 1M input / output tokens; idle window {result.idle_minutes:g} min, sweep every {result.sweep_minutes:g} min; "
            f"start times {result.start_source}, stops {result.stop_s:.0f} s"
            + (f"; {skipped} ALB entries that are not POSTs skipped" if skipped else "")
            + "."
        )
    )
    for name in ("always-on", "schedule", "idle", "wake"):
        print(render.note(f"Break-even of {name} against the managed API: {result.break_even_words(name)}."))


def _prices(args: argparse.Namespace) -> int:
    try:
        catalog = load_catalog(args.prices)
    except CatalogError as exc:
        return _error(f"--prices: {exc}")
    if args.json:
        print(catalog.model_dump_json(indent=2))
        return 0
    from servingctl import render

    # Keys and sources are never cut: the date and source go on their own wrapped line under each
    # price, so the three columns fit 80 characters.
    rows: list[tuple[str, str, str]] = []
    notes: list[str] = []
    for key, p in catalog.instances.items():
        rows.append(("instance", key, f"{p.hourly_usd}/h" + (" (estimate)" if p.estimate else "")))
        notes.append(f"as of {p.as_of}, source: {p.source}")
    for key, infra in catalog.infrastructure.items():
        monthly = f"/{MONTHLY_UNITS.get(key.split('-')[-2], 'GB')}-month"
        amount = next(
            f"{v}{unit}"
            for v, unit in ((infra.hourly_usd, "/h"), (infra.per_gb_usd, "/GB"), (infra.monthly_usd, monthly))
            if v is not None
        )
        rows.append(("infrastructure", key, amount))
        notes.append(f"as of {infra.as_of}, source: {infra.source}")
    for key, api in catalog.managed_apis.items():
        rows.append(("managed API", key, f"in {api.input_usd_per_m} / out {api.output_usd_per_m} per 1M"))
        notes.append(f"as of {api.as_of}, source: {api.source}")
    print(f"Price catalog ({catalog.currency})")
    print(render.columns_with_notes(("kind", "key", "price"), rows, notes))
    return 0


def _usd(value: float | None) -> str:
    return "unpriced" if value is None else f"{value:,.2f}"


def _ledger(args: argparse.Namespace, client: Client) -> int:
    """GET /ledger: sessions and monthly totals, or that there are none yet."""
    from servingctl import render
    from servingctl.api.models import Ledger
    from servingctl_cli.client import answer_as

    answer = client.get("/ledger", {"profile": args.profile})
    ledger = answer_as(Ledger, answer, "GET /ledger")
    if args.json:
        print(json.dumps(answer))
        return 0
    if not ledger.sessions:
        print(
            "no sessions in the ledger yet"
            + (f" for {args.profile}" if args.profile else "")
            + " (a session opens when a start brings a profile up)"
        )
        return 0
    # The instance type is in `status`; instances, their hours and USD/h say what the cost is made of.
    sessions = [
        (
            s.profile,
            render.when(s.started_at, short=True),
            str(s.instances),
            f"{s.instance_hours:.2f}",
            _usd(s.hourly_usd),
            _usd(s.cost_usd),
            "running" if s.open else f"{s.close_reason or 'ended'} {render.when(s.stopped_at, short=True)}",
        )
        for s in ledger.sessions
    ]
    print(
        render.table(
            ("profile", "started\n(UTC)", "instances", "instance\nhours", "USD/h", "cost\nUSD", "session\n(UTC)"),
            sessions,
            right=(2, 3, 4, 5),
        )
    )
    print()
    monthly = [(m.profile, m.month, f"{m.uptime_hours:.2f}", _usd(m.cost_usd)) for m in ledger.monthly]
    print(render.table(("profile", "month", "hours", "cost USD"), monthly, right=(2,)))
    total = ledger.total_cost_usd
    print()
    print(
        render.note(
            f"total: {_usd(total)}"
            + (" USD" if total is not None else " (a session's instance type has no price in the catalog)")
        )
    )
    _print_warm_pools(ledger.warm_pools)
    return 0


def _print_warm_pools(pools: list[WarmPoolCost]) -> None:
    """The standing cost of warm (stopped) instances: their volumes bill whether or not anything runs."""
    from servingctl import render

    if not pools:
        return
    rows = [
        (p.pool, str(p.instances), f"{p.volume_gib} GiB", _usd(p.volume_monthly_usd), _usd(p.standing_monthly_usd)) for p in pools
    ]
    print()
    print(render.note("warm pools (stopped instances: gp3 volume, throughput and IOPS billed all month)"))
    print(render.table(("pool", "warm\ninstances", "volume", "USD/month\neach", "standing\nUSD/month"), rows, right=(1, 3, 4)))


def _deployed_egress(directory: str) -> str:
    """The egress mode `terraform output` reports for a deployed configuration (CatalogError-free:
    ValueError says what failed)."""
    import shutil
    import subprocess

    binary = shutil.which("terraform")
    if binary is None:
        raise ValueError("terraform is not on PATH; pass --egress nat|endpoints instead")
    done = subprocess.run(
        [binary, f"-chdir={directory}", "output", "-json", "egress"], capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ValueError(f"`terraform output egress` failed in {directory} ({reason}); pass --egress nat|endpoints instead")
    mode = json.loads(done.stdout).get("mode")
    if mode not in ("nat", "endpoints"):
        raise ValueError(f"`terraform output egress` in {directory} gave mode {mode!r}, not nat or endpoints")
    return str(mode)


def _idle(args: argparse.Namespace) -> int:
    """The standing cost a month: the network option, the ALB, and the warm pools' volumes (from the
    API's ledger when it answers)."""
    from servingctl import render
    from servingctl.costs.idle import EgressPlan, idle_costs
    from servingctl_cli.client import ApiError, Unreachable, connect

    if args.egress:
        mode, told = args.egress, "--egress"
    elif args.terraform_dir:
        try:
            mode, told = _deployed_egress(args.terraform_dir), f"terraform output in {args.terraform_dir}"
        except ValueError as exc:
            return _error(f"--terraform-dir: {exc}")
    else:
        mode, told = "nat", "assumed: Terraform's default (pass --terraform-dir DIR or --egress)"
    try:
        catalog = load_catalog(args.prices)
    except CatalogError as exc:
        return _error(f"--prices: {exc}")
    region = args.region or "us-east-1"
    lines = [
        (line.item, line.count, line.price_key, line.monthly_usd) for line in idle_costs(catalog, region, EgressPlan.of(mode))
    ]
    warm_note = None
    try:
        api = connect(args)
        try:
            for pool in api.get("/ledger").get("warm_pools") or []:
                lines.append(
                    (
                        f"warm pool {pool['pool']}: stopped instances' volumes",
                        pool["instances"],
                        "ebs-gp3-*-month",
                        pool["standing_monthly_usd"],
                    )
                )
        finally:
            api.close()
    except (Unreachable, ApiError) as exc:
        warm_note = f"warm pools' volumes not included: {exc}"
    total = None if any(usd is None for *_, usd in lines) else sum(usd or 0.0 for *_, usd in lines)
    if args.json:
        print(
            json.dumps(
                {
                    "egress": mode,
                    "egress_from": told,
                    "region": region,
                    "lines": [{"item": i, "count": c, "price_key": k, "monthly_usd": u} for i, c, k, u in lines],
                    "total_monthly_usd": total,
                    "not_included": warm_note,
                }
            )
        )
        return 0
    print(render.note(f"standing cost a month in {region} with nothing running; egress {mode} ({told})"))
    rows = [(key, str(count), f"{usd:,.2f}" if usd is not None else "unpriced") for _, count, key, usd in lines]
    print(render.columns_with_notes(("price key", "count", "USD/month"), rows, [item for item, *_ in lines], right=(1, 2)))
    print(f"\ntotal: {_usd(total)}" + (" USD a month" if total is not None else " (a line has no price in the catalog)"))
    if warm_note:
        print(render.note(warm_note))
    return 0
