"""`servingctl costs`: compare self-hosted cost per token with a managed API; list the price catalog."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from servingctl.cli.client import Client, add_api_arguments, api_command
from servingctl.cli.main import summary
from servingctl.costs import CatalogError, CompareInput, compare, load_catalog, slo_cost_of
from servingctl.schema.comparison import DayUse, SloCostInput
from servingctl.wording import for_flags

# pydantic field -> the flag a user typed, so errors name what they can fix.
_FLAGS = {
    "aggregate_tok_s": "--aggregate-tok-s",
    "input_tokens": "--input-tokens",
    "output_tokens": "--output-tokens",
    "api_input_usd_per_m": "--api-input-usd-per-m",
    "api_output_usd_per_m": "--api-output-usd-per-m",
    "hours": "--hours",
    "self_hosted_monthly_usd": "--self-hosted-monthly-usd",
    "hourly_usd": "--hourly-usd",
    "standing_monthly_usd": "--standing-monthly-usd",
}
# Unit of a monthly infrastructure price, by the part of its key before "-month".
MONTHLY_UNITS = {"gb": "GB", "mibps": "MiB/s", "iops": "IOPS"}


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `costs` command group."""
    costs = subparsers.add_parser("costs", help=summary("costs"))
    sub = costs.add_subparsers(dest="costs_command", metavar="SUBCOMMAND", required=True)

    cmp = sub.add_parser("compare", help="monthly cost of measured throughput, self-hosted vs managed API")
    price = cmp.add_mutually_exclusive_group(required=True)
    price.add_argument("--self-hosted-monthly-usd", type=float, help="all-in monthly self-hosted cost")
    price.add_argument("--hourly-usd", type=float, help="all-in self-hosted cost per running hour")
    cmp.add_argument("--aggregate-tok-s", type=float, required=True, help="measured aggregate output tok/s")
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
    cmp.add_argument("--prices", help="price file overriding the packaged catalog")
    cmp.add_argument("--json", action="store_true", help="machine-readable output")
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
    at.add_argument("--prices", help="price file overriding the packaged catalog")
    at.add_argument("--json", action="store_true", help="machine-readable output")
    at.set_defaults(func=_slo)

    prices = sub.add_parser("prices", help="show the price catalog with sources and dates")
    prices.add_argument("--prices", help="price file overriding the packaged catalog")
    prices.add_argument("--json", action="store_true", help="machine-readable output")
    prices.set_defaults(func=_prices)

    ledger = sub.add_parser("ledger", help="what every session cost (uptime x hourly price), and per profile per month")
    ledger.add_argument("--profile", help="only this serving profile")
    add_api_arguments(ledger)
    ledger.set_defaults(func=api_command(_ledger))


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
                "aggregate_tok_s": args.aggregate_tok_s,
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

    ledger = client.get("/ledger", {"profile": args.profile})
    if args.json:
        print(json.dumps(ledger))
        return 0
    if not ledger["sessions"]:
        print(
            "no sessions in the ledger yet"
            + (f" for {args.profile}" if args.profile else "")
            + " (a session opens when a start brings a profile up)"
        )
        return 0
    # The instance type is in `status`; hours and USD/h say what the cost is made of.
    sessions = [
        (
            s["profile"],
            render.when(s["started_at"], short=True),
            f"{s['uptime_hours']:.2f}",
            _usd(s["hourly_usd"]),
            _usd(s["cost_usd"]),
            "running" if s["open"] else f"{s['close_reason'] or 'ended'} {render.when(s['stopped_at'], short=True)}",
        )
        for s in ledger["sessions"]
    ]
    print(
        render.columns(("profile", "started\n(UTC)", "hours", "USD/h", "cost\nUSD", "session\n(UTC)"), sessions, right=(2, 3, 4))
    )
    print()
    monthly = [(m["profile"], m["month"], f"{m['uptime_hours']:.2f}", _usd(m["cost_usd"])) for m in ledger["monthly"]]
    print(render.columns(("profile", "month", "hours", "cost USD"), monthly, right=(2,)))
    total = ledger["total_cost_usd"]
    print(
        f"\ntotal: {_usd(total)}" + (" USD" if total is not None else " (a session's instance type has no price in the catalog)")
    )
    _print_warm_pools(ledger.get("warm_pools") or [])
    return 0


def _print_warm_pools(pools: list[dict[str, Any]]) -> None:
    """The standing cost of warm (stopped) instances: their volumes bill whether or not anything runs."""
    from servingctl import render

    if not pools:
        return
    rows = [
        (p["pool"], str(p["instances"]), f"{p['volume_gib']} GiB", _usd(p["volume_monthly_usd"]), _usd(p["standing_monthly_usd"]))
        for p in pools
    ]
    print("\nwarm pools (stopped instances: gp3 volume, throughput and IOPS billed all month)")
    print(render.columns(("pool", "warm\ninstances", "volume", "USD/month\neach", "standing\nUSD/month"), rows, right=(1, 3, 4)))
