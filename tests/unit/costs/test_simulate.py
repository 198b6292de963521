"""The cost what-if: traces read strictly (every refusal names its line and field) and the policies
replayed on small traces whose starts, stops, GPU time and waits are worked out by hand below.

Hand model of every case unless it says otherwise: starts take 300 s, stops 60 s, the sweep runs
every minute on the minute, the idle window is 10 minutes, 10 USD an hour, the API 1 / 2 USD per 1M
input / output tokens. A request is counted in its minute, which ends on the next minute.
"""

import gzip
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from servingctl.costs.simulate import Settings, StartModel, parse_schedule, simulate
from servingctl.costs.trace import AlbTokens, Request, TraceError, parse_trace, read_trace
from servingctl_cli.main import main

EVENTS = Path(__file__).parents[3] / "events" / "costs"
MONDAY = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)  # a Monday, inside the office hours
HOURLY, API_IN, API_OUT = 10.0, 1.0, 2.0
HEADER = "timestamp,input_tokens,output_tokens\n"


def _settings(**extra) -> Settings:
    values = {
        "hourly_usd": HOURLY,
        "api_input_usd_per_m": API_IN,
        "api_output_usd_per_m": API_OUT,
        "idle_minutes": 10.0,
        "sweep_s": 60.0,
        "stop_s": 60.0,
        "start": StartModel(modeled_s=300.0),
    }
    return Settings(**(values | extra))


def _at(*offsets: timedelta) -> list[Request]:
    return [Request(MONDAY + o, 1000, 500) for o in offsets]


def _minutes(policy) -> float:
    return round(policy.gpu_hours * 60, 6)


# ---- the idle window, at the limit and one past it ----------------------------------------------
def test_a_request_just_inside_the_idle_window_keeps_the_profile():
    # 09:00 wakes it: READY 09:05, the held request counted in minute 09:05 (ends 09:06). The next at
    # 09:15:59 is counted in minute 09:15, ends 09:16: the stop is due 09:26, the instance gone 09:27.
    result = simulate(_at(timedelta(0), timedelta(minutes=15, seconds=59)), _settings())
    wake = result.policy("wake")
    assert (wake.starts, wake.stops, wake.served, wake.waited) == (1, 1, 2, 1)
    assert _minutes(wake) == 27.0
    assert wake.wait_p50_s == wake.wait_p95_s == 300.0
    assert wake.cost_usd == pytest.approx(27 / 60 * HOURLY)


def test_a_request_just_past_the_idle_window_finds_it_stopping_and_waits_for_a_new_start():
    # Quiet since 09:06, so the 09:16:00 sweep stops it (gone 09:17). The 09:16:00 request finds it
    # stopping: the new start begins at 09:17, READY 09:22 (a wait of 360 s), counted until 09:23,
    # stopped at 09:33, gone 09:34. GPU: 17 + 17 minutes.
    result = simulate(_at(timedelta(0), timedelta(minutes=16)), _settings())
    wake = result.policy("wake")
    assert (wake.starts, wake.stops, wake.waited) == (2, 2, 2)
    assert _minutes(wake) == 34.0
    assert [(a.strftime("%H:%M"), b.strftime("%H:%M")) for a, b in wake.sessions] == [("09:00", "09:17"), ("09:17", "09:34")]
    assert wake.wait_p50_s == pytest.approx(330.0)  # of 300 and 360
    assert wake.wait_p95_s == pytest.approx(357.0)


def test_idle_without_wake_fails_the_requests_before_ready_and_they_do_not_count_as_use():
    # The 09:00 request fails (nothing holds it); quiet since READY 09:05, stop due 09:15, gone 09:16.
    # 09:15:59 arrives after the stop was decided: a new start, READY 09:21, and it fails too.
    result = simulate(_at(timedelta(0), timedelta(minutes=15, seconds=59)), _settings())
    idle = result.policy("idle")
    assert (idle.starts, idle.stops, idle.served, idle.unserved, idle.waited) == (2, 2, 0, 2, 0)
    assert [(a.strftime("%H:%M:%S"), b.strftime("%H:%M:%S")) for a, b in idle.sessions] == [
        ("09:00:00", "09:16:00"),
        ("09:16:00", "09:32:00"),
    ]


def test_the_sweep_period_rounds_the_stop_up_to_its_next_run():
    # The same kept case with the sweep every 5 minutes: due 09:26, the sweep runs at 09:30.
    result = simulate(_at(timedelta(0), timedelta(minutes=15, seconds=59)), _settings(sweep_s=300.0))
    assert _minutes(result.policy("wake")) == 31.0


# ---- one request, always on and the managed API --------------------------------------------------
def test_a_trace_of_one_request():
    result = simulate(_at(timedelta(0)), _settings())
    assert result.span_hours == 24.0  # the whole UTC day it falls in
    always = result.policy("always-on")
    assert (always.gpu_hours, always.starts, always.stops, always.served) == (24.0, 0, 0, 1)
    assert always.cost_usd == pytest.approx(240.0)
    assert always.monthly_usd == pytest.approx(240.0 * 730 / 24)
    wake = result.policy("wake")
    assert (wake.starts, wake.stops, _minutes(wake)) == (1, 1, 17.0)  # READY 09:05, quiet 09:06, stop 09:16, gone 09:17
    api = result.policy("managed-api")
    assert api.cost_usd == pytest.approx((1000 * API_IN + 500 * API_OUT) / 1e6)
    assert always.ratio_to_api == pytest.approx(240.0 / api.cost_usd)
    assert result.break_even_words("always-on") == f"{240.0 / api.cost_usd:,.0f} x this traffic (at the same GPU hours)"


def test_a_stop_past_the_span_is_billed_to_the_span_only_and_not_counted():
    result = simulate(_at(timedelta(hours=14, minutes=58)), _settings())  # 23:58: READY 00:03 the next day
    wake = result.policy("wake")
    assert (wake.starts, wake.stops, _minutes(wake)) == (1, 0, 2.0)


# ---- the schedule's edges -------------------------------------------------------------------------
def test_the_schedule_serves_from_its_first_minute_to_before_its_end():
    # Office hours 08:00-18:00 UTC: started 300 s ahead (07:55), stopped by the 18:00 sweep, gone 18:01.
    day = MONDAY.replace(hour=0)
    requests = [
        Request(day + timedelta(hours=7, minutes=59, seconds=59), 10, 10),
        Request(day + timedelta(hours=8), 10, 10),
        Request(day + timedelta(hours=17, minutes=59, seconds=59), 10, 10),
        Request(day + timedelta(hours=18), 10, 10),
    ]
    schedule = simulate(requests, _settings()).policy("schedule")
    assert (schedule.served, schedule.unserved, schedule.starts, schedule.stops) == (2, 2, 1, 1)
    assert [(a.strftime("%H:%M"), b.strftime("%H:%M")) for a, b in schedule.sessions] == [("07:55", "18:01")]
    assert _minutes(schedule) == 10 * 60 + 6


def test_the_schedule_runs_in_its_own_time_zone_and_not_at_the_weekend():
    # 08:00-18:00 in Tokyo is 23:00-09:00 UTC the day before; Saturday 2026-12-12 is not a weekday.
    saturday = Request(datetime(2026, 12, 12, 3, 0, tzinfo=UTC), 10, 10)
    tokyo = parse_schedule("mon-fri 08:00-18:00 Asia/Tokyo")
    result = simulate([Request(MONDAY.replace(hour=2), 10, 10), saturday], _settings(schedule=tokyo))
    schedule = result.policy("schedule")
    assert (schedule.served, schedule.unserved) == (1, 1)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("mon-fri", "expected DAYS HH:MM-HH:MM [ZONE]"),
        ("mon-fri 08:00", "'08:00': expected HH:MM-HH:MM"),
        ("weekdays 08:00-18:00", "days must be a range of mon, tue"),
        ("mon-fri 08:00-18:00 Mars/Olympus", "unknown IANA time zone"),
        ("mon-fri 8-18", "begin_time: String should match pattern"),
    ],
)
def test_a_bad_schedule_is_refused_naming_the_part(text, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        parse_schedule(text)


# ---- start times from the history -----------------------------------------------------------------
def test_start_times_are_drawn_from_the_history_with_a_seed():
    requests = _at(*(timedelta(hours=h) for h in range(6)))  # six wakes an hour apart

    def wake(history: tuple[float, ...], seed: int):
        return simulate(requests, _settings(start=StartModel(history_s=history, seed=seed))).policy("wake")

    assert wake((100.0, 500.0), 7) == wake((100.0, 500.0), 7)  # the same draws for the same seed
    assert wake((120.0,), 0).wait_p50_s == 120.0
    # A 100 s start: READY 09:01:40, counted until 09:02, stopped 09:12, gone 09:13 (780 s); a 500 s
    # one: READY 09:08:20, until 09:09, stopped 09:19, gone 09:20 (1200 s). Both were drawn.
    lengths = {round((b - a).total_seconds()) for a, b in wake((100.0, 500.0), 7).sessions}
    assert lengths == {780, 1200}
    in_order = simulate(requests, _settings(start=StartModel(history_s=(100.0, 500.0), in_order=True))).policy("wake")
    assert [round((b - a).total_seconds()) for a, b in in_order.sessions] == [780, 1200] * 3


# ---- reading traces ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("timestamp,input_tokens\n2026-12-07T09:00:00Z,1\n", "t.csv:1: header: missing column output_tokens"),
        (
            HEADER + "2026-12-07T09:00:00Z,1,2\n2026-12-07T08:59:59Z,1,2\n",
            "t.csv:3: timestamp: 2026-12-07T08:59:59+00:00 is before",
        ),
        (HEADER + "2026-12-07T09:00:00Z,1,2\nyesterday,1,2\n", "t.csv:3: timestamp: 'yesterday' is not an ISO 8601 time"),
        (HEADER + "2026-12-07T09:00:00Z,-1,2\n", "t.csv:2: input_tokens: -1 is negative"),
        (HEADER + "2026-12-07T09:00:00Z,1,2.5\n", "t.csv:2: output_tokens: '2.5' is not a whole number"),
        (HEADER + "2026-12-07T09:00:00Z,1,\n", "t.csv:2: output_tokens: missing"),
        (HEADER, "t.csv: no requests in the trace"),
    ],
)
def test_a_bad_csv_row_is_refused_naming_its_line_and_field(text, message):
    with pytest.raises(TraceError) as caught:
        parse_trace(text, "csv", name="t.csv")
    assert str(caught.value).startswith(message), str(caught.value)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"timestamp": "2026-12-07T09:00:00Z", "input_tokens": 1}', "t.jsonl:2: output_tokens: missing"),
        (
            '{"timestamp": "2026-12-07T09:00:00Z", "input_tokens": 1, "output_tokens": -3}',
            "t.jsonl:2: output_tokens: -3 is negative",
        ),
        ('{"timestamp": true, "input_tokens": 1, "output_tokens": 3}', "t.jsonl:2: timestamp: missing"),
        ("[1, 2, 3]", "t.jsonl:2: not a JSON object"),
        ('{"timestamp": ', "t.jsonl:2: not valid JSON"),
    ],
)
def test_a_bad_jsonl_line_is_refused_naming_its_line_and_field(line, message):
    first = '{"timestamp": 1796634000, "input_tokens": 1, "output_tokens": 2}'  # seconds since the epoch
    with pytest.raises(TraceError) as caught:
        parse_trace(first + "\n" + line + "\n", "jsonl", name="t.jsonl")
    assert str(caught.value).startswith(message), str(caught.value)


def test_times_without_a_zone_are_utc_and_offsets_are_converted():
    trace = parse_trace(HEADER + "2026-12-07T09:00:00,1,2\n2026-12-07T10:00:00+01:00,3,4\n", "csv")
    assert [r.at for r in trace.requests] == [MONDAY, MONDAY]


def test_alb_access_logs_read_with_assumed_tokens(tmp_path):
    # The example: three POSTs (two of them out of order, as several nodes deliver) and a GET /v1/models.
    fixed = read_trace(EVENTS / "alb_access.log", alb=AlbTokens(input_tokens=700, output_tokens=90))
    assert fixed.skipped == 1
    assert [r.at.strftime("%H:%M:%S.%f") for r in fixed.requests] == ["09:00:00.208000", "09:40:56.090000", "09:41:27.420000"]
    assert {(r.input_tokens, r.output_tokens) for r in fixed.requests} == {(700, 90)}
    by_bytes = read_trace(EVENTS / "alb_access.log", alb=AlbTokens(mode="bytes", bytes_per_token=4.0))
    assert [(r.input_tokens, r.output_tokens) for r in by_bytes.requests] == [(1280, 578), (1025, 495), (2450, 1030)]
    packed = tmp_path / "app.log.gz"  # as ELB delivers them
    packed.write_bytes(gzip.compress((EVENTS / "alb_access.log").read_bytes()))
    assert read_trace(packed, alb=AlbTokens(input_tokens=700, output_tokens=90)).requests == fixed.requests


def test_a_directory_of_alb_logs_is_read_whole_and_sorted(tmp_path):
    lines = (EVENTS / "alb_access.log").read_text().splitlines()
    node = tmp_path / "AWSLogs" / "123456789012" / "elasticloadbalancing" / "us-east-1" / "2026" / "12" / "07"
    node.mkdir(parents=True)
    (node / "a.log.gz").write_bytes(gzip.compress("\n".join(lines[2:]).encode()))  # the later requests first
    (node / "b.log.gz").write_bytes(gzip.compress("\n".join(lines[:2]).encode()))
    (node / "c.log.gz").write_bytes(gzip.compress(b""))  # a node that served nothing in its 5 minutes
    trace = read_trace(tmp_path, "alb")
    assert trace.skipped == 1
    assert [r.at.strftime("%H:%M") for r in trace.requests] == ["09:00", "09:40", "09:41"]
    with pytest.raises(TraceError, match="a directory is read as ALB access logs only"):
        read_trace(tmp_path, "csv")


def test_a_short_alb_line_is_refused_naming_the_field():
    with pytest.raises(TraceError, match=r"a.log:1: request_creation_time: missing \(an ALB access log entry has at least 22"):
        parse_trace(
            'http 2026-12-07T09:00:02Z app/x 10.0.0.1:1 - 0 0 0 200 200 1 1 "POST http://x/ HTTP/1.1"', "alb", name="a.log"
        )


def test_the_format_comes_from_the_suffix_or_the_flag(tmp_path):
    unknown = tmp_path / "trace.txt"
    unknown.write_text(HEADER + "2026-12-07T09:00:00Z,1,2\n")
    with pytest.raises(TraceError, match="format: cannot tell from the file name; give --format"):
        read_trace(unknown)
    assert len(read_trace(unknown, "csv").requests) == 1


# ---- the command -----------------------------------------------------------------------------------
def test_cli_simulate_writes_the_table_the_json_and_the_chart(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text(HEADER + "2026-12-07T09:00:00Z,1000,500\n2026-12-07T09:15:59Z,1000,500\n")
    args = ["costs", "simulate", "--trace", str(trace), "--hourly-usd", "10", "--start-s", "300", "--stop-s", "60"]
    args += ["--sweep-minutes", "1", "--idle-minutes", "10", "--api-input-usd-per-m", "1", "--api-output-usd-per-m", "2"]
    chart = tmp_path / "sim.png"
    assert main([*args, "--json", "--chart", str(chart)]) == 0
    answer = json.loads(capsys.readouterr().out)
    wake = next(p for p in answer["policies"] if p["policy"] == "wake")
    assert (wake["starts"], wake["stops"], round(wake["gpu_hours"] * 60, 6)) == (1, 1, 27.0)
    assert answer["chart"] == str(chart) and chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main([*args, "--chart", "none"]) == 0
    out = capsys.readouterr().out
    assert "wake" in out and "300 / 300" in out and "Break-even of wake against the managed API" in out


@pytest.mark.parametrize("columns", [60, 40])
def test_cli_simulate_fits_a_narrow_terminal_one_record_per_policy(tmp_path, capsys, monkeypatch, columns):
    trace = tmp_path / "t.csv"
    trace.write_text(HEADER + "2026-12-07T09:00:00Z,1000,500\n2026-12-07T09:15:59Z,1000,500\n")
    monkeypatch.setenv("COLUMNS", str(columns))
    assert main(["costs", "simulate", "--trace", str(trace), "--hourly-usd", "10", "--chart", "none"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in out) <= columns
    first = out.index("always-on")
    assert out[first + 1 : first + 3] == ["  GPU h (span)      24.0", "  USD / month       7,300.00"]
    assert [line for line in out if line in ("always-on", "schedule", "idle", "wake")] == [
        "always-on",
        "schedule",
        "idle",
        "wake",
    ]


def test_cli_simulate_draws_start_times_from_a_start_history_file(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text(HEADER + "2026-12-07T09:00:00Z,1000,500\n")
    history = tmp_path / "starts.json"
    start = {"outcome": "READY", "requested_at": "2026-12-01T09:00:00+00:00", "ended_at": "2026-12-01T09:02:00+00:00"}
    failed = {"outcome": "FAILED", "requested_at": "2026-12-01T10:00:00+00:00", "ended_at": "2026-12-01T10:30:00+00:00"}
    history.write_text(json.dumps({"profile": "p", "starts": [start, failed]}))
    assert main(["costs", "simulate", "--trace", str(trace), "--start-history", str(history), "--chart", "none", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["start_source"].startswith("drawn from 1 recorded start (median 120 s")
    assert next(p for p in answer["policies"] if p["policy"] == "wake")["wait_p50_s"] == 120.0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--idle-minutes", "0"], "--idle-minutes: must be greater than 0"),
        (["--stop-s", "-1"], "--stop-s: must be 0 or more"),
        (["--alb-output-tokens", "-1"], "--alb-output-tokens: must be 0 or more"),
        (["--schedule", "someday"], "--schedule: 'someday': expected DAYS HH:MM-HH:MM [ZONE]"),
        (
            ["--instance-type", "p5.48xlarge"],
            "--instance-type: no price for us-east-1/p5.48xlarge in the catalog; give --hourly-usd",
        ),
        (["--days", "0.25"], "--days: the trace's last request (2026-12-07T09:00:00+00:00) is past 0.25 days"),
    ],
)
def test_cli_simulate_refuses_bad_flags_naming_them(tmp_path, capsys, extra, message):
    trace = tmp_path / "t.csv"
    trace.write_text(HEADER + "2026-12-07T09:00:00Z,1000,500\n")
    assert main(["costs", "simulate", "--trace", str(trace), "--chart", "none", *extra]) == 2
    assert message in capsys.readouterr().err


def test_cli_simulate_refuses_an_empty_trace(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text(HEADER)
    assert main(["costs", "simulate", "--trace", str(trace), "--chart", "none"]) == 2
    assert f"error: {trace}: no requests in the trace" in capsys.readouterr().err


def test_the_example_traces_replay():
    office = read_trace(EVENTS / "office_hours.csv")
    bursts = read_trace(EVENTS / "sparse_bursts.jsonl")
    span = (datetime(2026, 12, 7, tzinfo=UTC), datetime(2026, 12, 14, tzinfo=UTC))
    result = simulate(office.requests, _settings(span=span, sweep_s=300.0, idle_minutes=30.0))
    # Office hours on weekdays only: the schedule serves every request; always on costs the most.
    assert result.policy("schedule").unserved == 0
    assert result.policy("always-on").monthly_usd > result.policy("schedule").monthly_usd > result.policy("wake").monthly_usd
    sparse = simulate(bursts.requests, _settings(sweep_s=300.0, idle_minutes=30.0)).policy("wake")
    assert sparse.waited > 0 and sparse.unserved == 0
