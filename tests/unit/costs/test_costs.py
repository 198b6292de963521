"""Costs: the reference article's ratios, the catalog with overrides, ledger arithmetic, the CLI."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from servingctl.costs import (
    CatalogError,
    CompareInput,
    compare,
    load_catalog,
    monthly_totals,
    priced_api,
    session_cost,
    stored_session_cost,
)
from servingctl.store.models import InstanceSpan, Session
from servingctl_cli.main import main

# FACTS.md: MTP=1 concurrency-4 aggregate tok/s per input length, and the article's published ratios.
REFERENCE = [(254, 358.41, 10.74, 827), (2046, 330.29, 4.23, 2099), (8185, 202.11, 2.17, 4087)]


@pytest.mark.parametrize(("input_tokens", "tok_s", "ratio", "api_usd"), REFERENCE)
def test_reproduces_the_reference_ratios(input_tokens, tok_s, ratio, api_usd):
    result = compare(
        CompareInput(
            self_hosted_monthly_usd=8887,
            api_input_usd_per_m=0.22,
            api_output_usd_per_m=0.66,
            output_tok_s=tok_s,
            input_tokens=input_tokens,
            output_tokens=256,
        )
    )
    assert round(result.ratio_self_hosted_to_api, 2) == ratio
    assert round(result.api_monthly_usd) == api_usd
    assert not result.breaks_even


def test_hand_computed_small_case():
    # 100 tok/s for 10 h = 3.6 M output tokens = 36,000 requests of 100 out / 1,000 in = 36 M input tokens.
    result = compare(
        CompareInput(
            hourly_usd=2.0,
            hours=10,
            output_tok_s=100,
            input_tokens=1000,
            output_tokens=100,
            api_input_usd_per_m=1.0,
            api_output_usd_per_m=2.0,
        )
    )
    assert result.self_hosted_monthly_usd == pytest.approx(20.0)
    assert result.api_monthly_usd == pytest.approx(36 * 1.0 + 3.6 * 2.0)
    assert result.self_hosted_usd_per_m_output == pytest.approx(20.0 / 3.6)
    assert result.break_even_utilization == pytest.approx(20.0 / 43.2)
    assert result.breaks_even


def test_exactly_one_self_hosted_price_is_required():
    with pytest.raises(ValidationError, match="exactly one"):
        CompareInput(output_tok_s=1, input_tokens=1, output_tokens=1, api_input_usd_per_m=0, api_output_usd_per_m=0)


def test_cli_compare_json_matches_the_reference(capsys):
    code = main(
        [
            "costs",
            "compare",
            "--self-hosted-monthly-usd",
            "8887",
            "--api-input-usd-per-m",
            "0.22",
            "--api-output-usd-per-m",
            "0.66",
            "--output-tok-s",
            "330.29",
            "--input-tokens",
            "2046",
            "--output-tokens",
            "256",
            "--hours",
            "730",
            "--json",
        ]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert round(out["ratio_self_hosted_to_api"], 2) == 4.23
    assert out["breaks_even"] is False


def test_cli_uses_the_catalogs_default_api_and_names_bad_flags(capsys):
    args = "costs compare --self-hosted-monthly-usd 8887 --output-tok-s 202.11 --input-tokens 8185 --output-tokens 256 --json"
    assert main(args.split()) == 0
    assert round(json.loads(capsys.readouterr().out)["ratio_self_hosted_to_api"], 2) == 2.17
    assert main(args.replace("--output-tokens 256", "--output-tokens 0").split()) == 2
    assert "error: --output-tokens must be greater than 0\n" in capsys.readouterr().err  # said in words, at the limit
    assert main(args.replace("--output-tok-s 202.11", "--output-tok-s -1").split()) == 2
    assert "error: --output-tok-s must be greater than 0\n" in capsys.readouterr().err
    assert main([*args.split(), "--hours", "745"]) == 2  # one past the limit (31 days of 24 h)
    assert "error: --hours must be at most 744\n" in capsys.readouterr().err
    assert main([*args.split(), "--hours", "744"]) == 0
    capsys.readouterr()
    assert main([*args.split(), "--api", "nope"]) == 2
    err = capsys.readouterr().err
    assert "error: --api: unknown managed API 'nope'; allowed values: fireworks/deepseek-v4-flash" in err and "[" not in err


def _priced_at(input_usd: float, output_usd: float):
    inputs = CompareInput(
        hourly_usd=12.0,
        api_input_usd_per_m=input_usd,
        api_output_usd_per_m=output_usd,
        output_tok_s=300.0,
        input_tokens=256,
        output_tokens=256,
    )
    return {"in256-c4": compare(inputs)}


def test_a_comparison_is_named_after_the_catalog_api_with_its_prices_and_nothing_else():
    api = load_catalog().managed_apis["fireworks/deepseek-v4-flash"]
    assert priced_api(_priced_at(api.input_usd_per_m, api.output_usd_per_m)) == "fireworks/deepseek-v4-flash"
    assert priced_api(_priced_at(api.input_usd_per_m, api.output_usd_per_m + 0.01)) is None
    assert priced_api({}) is None and priced_api(None) is None


def test_catalog_override_replaces_entries_and_keeps_the_rest(tmp_path):
    override = tmp_path / "prices.json"
    override.write_text(
        json.dumps({"instances": {"us-east-1/g7e.2xlarge": {"hourly_usd": 3.5, "source": "my quote", "as_of": "2026-11-30"}}})
    )
    catalog = load_catalog(override)
    assert catalog.instance("us-east-1", "g7e.2xlarge").hourly_usd == 3.5
    assert catalog.instance("us-east-1", "g7e.12xlarge").estimate is True
    assert catalog.managed_api().output_usd_per_m == 0.66


def test_bad_catalog_names_the_entry(tmp_path):
    bad = tmp_path / "prices.json"
    bad.write_text(json.dumps({"instances": {"us-east-1/x.large": {"hourly_usd": -1, "source": "s", "as_of": "2026-01-01"}}}))
    with pytest.raises(CatalogError, match=r"instances\.us-east-1/x\.large\.hourly_usd"):
        load_catalog(bad)


def test_session_cost_accrues_until_now_and_unpriced_instances_say_so():
    catalog = load_catalog()
    start = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    closed = session_cost(
        catalog,
        profile="deepseek-v4-flash",
        region="us-east-1",
        instance_type="g7e.12xlarge",
        started_at=start,
        ended_at=start + timedelta(minutes=90),
        now=start + timedelta(days=1),
    )
    assert closed.uptime_hours == pytest.approx(1.5)
    assert closed.cost_usd == pytest.approx(1.5 * 12.17)
    open_ = session_cost(
        catalog,
        profile="nemotron-nano",
        region="us-east-1",
        instance_type="g7e.4xlarge",  # a fallback type the catalog has no price for
        started_at=start,
        ended_at=None,
        now=start + timedelta(hours=2),
    )
    assert open_.uptime_hours == pytest.approx(2.0)
    assert open_.cost_usd is None
    totals = monthly_totals([closed, closed, open_])
    assert totals[("deepseek-v4-flash", "2026-12")]["cost_usd"] == pytest.approx(3 * 12.17)
    assert totals[("nemotron-nano", "2026-12")]["cost_usd"] is None


def test_each_instance_of_a_session_bills_its_own_time():
    catalog = load_catalog()
    start = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    stored = Session.model_validate_json(  # a record written before replicas: no instances field
        '{"profile": "p", "session_id": "s", "pool": "g7e-2gpu", "instance_type": "g7e.12xlarge",'
        ' "started_at": "2026-12-01T09:00:00.000Z", "stopped_at": "2026-12-01T11:00:00.000Z", "uptime_s": 7200}'
    )
    old = stored_session_cost(catalog, "us-east-1", stored, start + timedelta(days=1))
    assert (old.instances, old.uptime_hours, old.instance_hours) == (1, 2.0, 2.0)
    assert old.cost_usd == pytest.approx(2 * 12.17)
    # Two replicas: the first from its launch a minute in to the end, the second 30 min to 1 h 30
    # (scaled in); a span begun before the session bills from the session's start.
    spans = [
        InstanceSpan(instance_id="i-1", started_at=start + timedelta(minutes=1), stopped_at=start + timedelta(hours=2)),
        InstanceSpan(instance_id="i-2", started_at=start + timedelta(minutes=30), stopped_at=start + timedelta(minutes=90)),
    ]
    two = stored.model_copy(update={"instances": spans})
    replicas = stored_session_cost(catalog, "us-east-1", two, start + timedelta(days=1))
    assert (replicas.instances, replicas.uptime_hours) == (2, 2.0)
    assert replicas.instance_hours == pytest.approx(119 / 60 + 1.0)
    assert replicas.cost_usd == pytest.approx((119 / 60 + 1.0) * 12.17)
    early = [InstanceSpan(instance_id="i-0", started_at=start - timedelta(hours=5), stopped_at=None)]
    assert stored_session_cost(catalog, "us-east-1", stored.model_copy(update={"instances": early}), start).instance_hours == 2.0
    # An open session bills the live spans until now (an instance still running among them).
    running = stored.model_copy(update={"stopped_at": None, "uptime_s": None, "instances": spans})
    live = [spans[0].model_copy(update={"stopped_at": None}), spans[1]]
    now = start + timedelta(hours=3)
    billed = stored_session_cost(catalog, "us-east-1", running, now, live)
    assert billed.instance_hours == pytest.approx(179 / 60 + 1.0) and billed.ended_at is None
    # Without live spans (none read) an open session is one instance, as before.
    assert stored_session_cost(catalog, "us-east-1", running, now).instance_hours == pytest.approx(3.0)


def test_a_session_is_priced_by_its_price_key_when_it_differs_from_the_instance_type():
    catalog = load_catalog()
    start = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    common = {
        "profile": "nemotron-nano",
        "region": "us-east-1",
        "instance_type": "g7e.4xlarge",
        "started_at": start,
        "ended_at": start + timedelta(hours=2),
        "now": start + timedelta(days=1),
    }
    keyed = session_cost(catalog, **common, price_key="g7e.12xlarge")
    assert (keyed.instance_type, keyed.hourly_usd, keyed.cost_usd) == ("g7e.4xlarge", 12.17, pytest.approx(2 * 12.17))
    assert session_cost(catalog, **common).cost_usd is None  # g7e.4xlarge itself is not in the catalog


def test_cli_still_takes_the_old_throughput_flag_and_says_it_is_deprecated(capsys):
    args = "costs compare --self-hosted-monthly-usd 8887 --aggregate-tok-s 202.11 --input-tokens 8185 --output-tokens 256 --json"
    assert main(args.split()) == 0
    printed = capsys.readouterr()
    out = json.loads(printed.out)
    assert out["inputs"]["output_tok_s"] == 202.11 and "aggregate_tok_s" not in out["inputs"]
    assert round(out["ratio_self_hosted_to_api"], 2) == 2.17  # the same figure as under --output-tok-s
    assert "--aggregate-tok-s is deprecated: use --output-tok-s" in printed.err


def test_a_comparison_stored_under_the_old_name_still_loads():
    old = {"aggregate_tok_s": 358.41, "input_tokens": 254, "output_tokens": 256, "api_input_usd_per_m": 0.22}
    loaded = CompareInput.model_validate(old | {"api_output_usd_per_m": 0.66, "hourly_usd": 12.17})
    assert loaded.output_tok_s == 358.41
    assert "aggregate_tok_s" not in loaded.model_dump_json() and '"output_tok_s":358.41' in loaded.model_dump_json()


def test_cli_compare_says_in_words_when_self_hosting_never_wins(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    args = "costs compare --hourly-usd 10 --output-tok-s 100 --input-tokens 1000 --output-tokens 200"
    assert main([*args.split(), "--api-input-usd-per-m", "0.22", "--api-output-usd-per-m", "0.66"]) == 0
    out = capsys.readouterr().out
    text = " ".join(out.split())
    assert "%" not in out.split("break-even utilization")[1].split("\n")[0]  # no 1578 % for a share that cannot exist
    assert "the managed API stays cheaper at any utilization" in text
    # 7,300 USD a month for 262.8 M output tokens = 27.78 USD per 1M; 1,578 tok/s = 100 x 7,300 / 462.6
    assert "if the API cost more than 27.78 USD per 1M output tokens for these requests (now 1.76)" in text
    assert "sustained more than 1,578 output tok/s (measured 100)" in text
    assert max(len(line) for line in out.splitlines()) <= 80


def test_cli_compare_says_the_utilization_when_self_hosting_can_win(capsys):
    args = "costs compare --hourly-usd 1 --output-tok-s 1000 --input-tokens 1000 --output-tokens 200"
    assert main([*args.split(), "--api-input-usd-per-m", "0.22", "--api-output-usd-per-m", "0.66"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "self-hosting is cheaper once more than 16% of the measured throughput is used during the 730 running hours" in text


def test_cli_prices_fit_80_columns_and_keep_every_key_date_and_source(capsys, monkeypatch):
    from servingctl.costs import load_catalog

    monkeypatch.setenv("COLUMNS", "80")
    assert main(["costs", "prices"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    catalog = load_catalog(None)
    text = " ".join(out.split())
    for key, price in [*catalog.instances.items(), *catalog.infrastructure.items(), *catalog.managed_apis.items()]:
        assert key in out and f"as of {price.as_of}, source: {' '.join(price.source.split())}" in text


def _at_slo(goodput_rps: float = 2.0, goodput_tok_s: float = 200.0):
    from servingctl.schema.results import ScenarioSummary, SloResult

    slo = SloResult(
        checks=[],
        good_requests=10,
        good_share=1.0,
        share_required=1.0,
        met=True,
        duration_s=5.0,
        goodput_rps=goodput_rps,
        goodput_tok_s=goodput_tok_s,
        throughput_rps=goodput_rps,
    )
    return ScenarioSummary.model_construct(name="in1000-c4", concurrency=4, input_tokens=1000, slo=slo)


def test_cost_at_the_slo_amortizes_cold_starts_and_idle_windows_hand_computed():
    from servingctl.costs import slo_cost
    from servingctl.schema.comparison import DayUse

    day = DayUse(running_hours=8, starts=1, cold_start_s=360, idle_minutes=30, source="test")
    assert day.overhead_hours == pytest.approx(0.6) and day.serving_hours == pytest.approx(7.4)
    cost = slo_cost(_at_slo(), hourly_usd=12.0, api_input_usd_per_m=0.22, api_output_usd_per_m=0.66, day=day)
    # 96 USD a day; 7.4 h x 3600 x 200 tok/s = 5.328 M tokens at the SLO; the API: (1000 x 0.22 + 100 x 0.66) / 1e6 a request
    assert cost.daily_usd == pytest.approx(96.0) and cost.output_tokens == pytest.approx(100.0)
    assert cost.self_hosted_usd_per_m_output == pytest.approx(96 / 5.328)
    assert cost.api_usd_per_m_output == pytest.approx(2.86)
    assert cost.capacity_requests_per_day == pytest.approx(53_280)
    assert cost.break_even_requests_per_day == pytest.approx(96 / 2.86e-4)
    assert not cost.breaks_even
    assert "the managed API stays cheaper: self-hosting would need 335,664 requests a day, more than the 53,280" in cost.words()
    dear = slo_cost(_at_slo(), hourly_usd=12.0, api_input_usd_per_m=0.22, api_output_usd_per_m=20.0, day=day)
    assert dear.breaks_even and "self-hosting is cheaper from 43,243 requests a day" in dear.words()
    # raw throughput would flatter self-hosting: half the goodput doubles the cost per token at the SLO
    half = slo_cost(_at_slo(1.0, 100.0), hourly_usd=12.0, api_input_usd_per_m=0.22, api_output_usd_per_m=0.66, day=day)
    assert half.self_hosted_usd_per_m_output == pytest.approx(2 * cost.self_hosted_usd_per_m_output)


def test_no_serving_hours_left_means_no_cost_per_token_and_no_break_even():
    from servingctl.costs import slo_cost
    from servingctl.schema.comparison import DayUse

    day = DayUse(running_hours=1, starts=2, cold_start_s=1800, idle_minutes=30, source="test")  # 2 h of overhead in 1 h
    cost = slo_cost(_at_slo(), hourly_usd=12.0, api_input_usd_per_m=0.22, api_output_usd_per_m=0.66, day=day)
    assert day.serving_hours == 0 and cost.self_hosted_usd_per_m_output is None and cost.capacity_requests_per_day == 0
    assert not cost.breaks_even


def test_the_day_comes_from_the_ledger_and_start_history_or_is_assumed_under_a_day():
    from servingctl.costs import day_use

    now = datetime(2026, 12, 11, 0, 0, tzinfo=UTC)
    sessions = [(now - timedelta(days=d, hours=3), now - timedelta(days=d, hours=1)) for d in range(1, 11)]  # 2 h a day
    day = day_use(sessions, [300.0, 500.0], now=now, idle_minutes=30)
    assert day.running_hours == pytest.approx(2.0, rel=0.02) and day.starts == pytest.approx(1.0, rel=0.02)
    assert day.cold_start_s == 400.0 and "ledger: 10 sessions over 10.1 days" in day.source
    fresh = day_use([(now - timedelta(minutes=5), None)], [], now=now, idle_minutes=30)
    assert (fresh.running_hours, fresh.starts, fresh.cold_start_s) == (24.0, 1.0, 0.0)
    assert "assumed always on" in fresh.source and "no start history" in fresh.source


def test_cli_slo_prices_a_goodput_by_hand_and_names_every_bad_flag(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    args = [
        "costs",
        "slo",
        "--goodput-rps",
        "2",
        "--goodput-tok-s",
        "200",
        "--input-tokens",
        "1000",
        "--hourly-usd",
        "12",
        "--running-hours",
        "8",
        "--cold-start-s",
        "360",
        "--idle-minutes",
        "30",
        "--api-input-usd-per-m",
        "0.22",
        "--api-output-usd-per-m",
        "0.66",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    text = " ".join(out.split())
    assert "self-hosting costs 18.02 USD per 1M output tokens, the managed API 2.86" in text
    assert "self-hosting would need 335,664 requests a day, more than the 53,280 it serves within the SLO in 7.4 h" in text
    assert max(len(line) for line in out.splitlines()) <= 80
    assert main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["capacity_requests_per_day"] == pytest.approx(53_280)
    bad = [a if a not in ("8", "2") else {"8": "24.5", "2": "0"}[a] for a in args]  # one past 24 h; no goodput
    assert main(bad) == 2
    assert "error: --running-hours must be at most 24; --goodput-rps must be greater than 0" in capsys.readouterr().err
    assert main([*args[:-4], "--running-hours", "24", "--api", "nope"]) == 2  # 24 h itself is allowed; the API is named
    assert "--api: unknown managed API 'nope'" in capsys.readouterr().err
