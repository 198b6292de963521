"""`servingctl report`: render a stored run (results.json or its directory, or a run id fetched
through the REST API) as the terminal table, report.md, vLLM-compatible files and charts,
optionally beside a baseline run and with costs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pydantic import ValidationError
from rich.console import Console

from servingctl.costs import CatalogError, cost_comparisons, load_catalog, priced_api
from servingctl.loadgen.outputs import ResultsFileError, write_all
from servingctl.loadgen.outputs.terminal import print_run, run_json
from servingctl.schema.comparison import HOURS_PER_MONTH
from servingctl.wording import for_flags
from servingctl_cli.client import add_api_arguments
from servingctl_cli.main import summary
from servingctl_cli.runs import RunNotAvailable, load_run
from servingctl_cli.settings import add_prices_argument


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `report` command."""
    p = subparsers.add_parser(
        "report",
        help=summary("report"),
        description="Render a benchmark run from its results.json (or the directory holding it).",
    )
    p.add_argument("results", metavar="RESULTS_OR_RUN_ID", help="results.json, the directory holding it, or a stored run's id")
    p.add_argument(
        "--compare",
        metavar="OTHER",
        help="a baseline run (file, directory or run id): each change with its 95%% bootstrap interval, "
        "faster/slower only when the interval says so, and both runs' fingerprints",
    )
    p.add_argument(
        "--output",
        metavar="DIR",
        help="where to write the files (default: the results' directory; servingctl-runs/RUN_ID for a run id)",
    )
    p.add_argument("--no-files", action="store_true", help="only print, write nothing")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    costs = p.add_argument_group("cost comparison (optional: give one self-hosted price)")
    price = costs.add_mutually_exclusive_group()
    price.add_argument("--self-hosted-monthly-usd", type=float, help="all-in monthly self-hosted cost")
    price.add_argument("--hourly-usd", type=float, help="all-in self-hosted cost per running hour")
    costs.add_argument("--api", help="managed API from the price catalog (default: the catalog's default)")
    costs.add_argument(
        "--hours", type=float, default=HOURS_PER_MONTH, help=f"hours a month the server runs (default {HOURS_PER_MONTH})"
    )
    add_prices_argument(costs)
    add_api_arguments(p, json_flag=False)
    p.set_defaults(func=_report)


def _error(message: str) -> int:
    print(f"servingctl report: error: {message}", file=sys.stderr)
    return 2


def _report(args: argparse.Namespace) -> int:
    try:
        loaded = load_run(args.results, args)
        baseline = load_run(args.compare, args).run if args.compare else None
    except (ResultsFileError, RunNotAvailable) as exc:
        return _error(str(exc))
    run = loaded.run
    comparisons = loaded.comparisons or None  # a stored run brings the comparisons made at its instance price
    if args.self_hosted_monthly_usd is not None or args.hourly_usd is not None:
        try:
            api = load_catalog(args.prices).managed_api(args.api)
            comparisons = cost_comparisons(
                run,
                api_input_usd_per_m=api.input_usd_per_m,
                api_output_usd_per_m=api.output_usd_per_m,
                self_hosted_monthly_usd=args.self_hosted_monthly_usd,
                hourly_usd=args.hourly_usd,
                hours=args.hours,
            )
        except CatalogError as exc:
            return _error(f"--prices: {exc}")
        except KeyError as exc:
            return _error(f"--api: {exc.args[0]}")
        except ValidationError as exc:
            return _error(
                for_flags(
                    exc.errors(),
                    {"hours": "--hours", "hourly_usd": "--hourly-usd", "self_hosted_monthly_usd": "--self-hosted-monthly-usd"},
                )
            )
    written: list[Path] = []
    if not args.no_files:
        out = Path(args.output) if args.output else loaded.directory
        written = write_all(run, out, comparison=comparisons, baseline=baseline)
    if args.json:
        print(
            json.dumps(run_json(run, baseline=baseline, comparisons=comparisons) | {"files": [str(p) for p in written]}, indent=1)
        )
        return 0
    print_run(run, baseline=baseline, comparisons=comparisons, api=priced_api(comparisons))
    if written:
        Console(stderr=True).print(
            f"wrote {len(written)} files to {written[0].parent}: report.md, report.html, results.json, "
            "requests.csv, scenarios.csv, vllm/, *.png"
        )
    return 0
