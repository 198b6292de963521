"""The cost what-if: a traffic trace replayed against serving policies, priced per month against
the managed API.

Policies (each a GPU on/off timeline over the trace's span, billed like the ledger: from a start's
request until its instance is gone):
- always-on: running the whole span, every request served at once;
- schedule: running in the schedule's periods (started one typical start ahead, so READY when a
  period begins; stopped at the first sweep after it ends); requests outside are not served;
- idle: the idle auto-stop of today: the first request that finds the profile stopped makes
  someone start it, and requests before READY fail (nothing holds them); the sweep stops it at
  its first run once no request reached the model for the idle window;
- wake: wake on request: the same idle stop, but requests before READY are held (503 with
  Retry-After, the client retries) and served at READY: they waited;
- managed-api: every request's tokens at the API's per-1M prices.

The sweep's idle rule is the controller's (servingctl.control.sweep): it runs every sweep period,
reads the ALB's per-minute RequestCount, whose last busy minute ends a minute after the request, and
stops once that end (or READY, when later) is an idle window old. Start durations are drawn (seeded)
from a profile's recorded starts (request to READY) when there are any, else the modeled cold start
of the reference (benchmarks/start_timeline.py). Requests are instants: a long answer that keeps
the server busy past its minute, capacity and leases are not modelled.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servingctl.costs.trace import Request
from servingctl.registry.models import Period, Schedule
from servingctl.registry.schedule import should_run
from servingctl.schema.comparison import HOURS_PER_MONTH

# The reference profile's modeled cold start, request to READY (benchmarks/README.md, start_timeline.py:
# EC2 launch and first boot, registration, image pull, 168 GB weights sync, vLLM load and compile,
# two ALB health checks, the smoke test): 840.7 s.
MODELED_START_S = 840.7
# A stop, from the sweep's decision to the instance gone (the twin's world: task stop 10 s, instance
# termination 60 s); the ledger bills until then.
MODELED_STOP_S = 70.0
SWEEP_MINUTES = 5  # template.yaml's schedule: rate(5 minutes)
METRIC_PERIOD_S = 60  # the ALB's RequestCount period the sweep reads
SIMULATE_PNG = "simulate.png"  # the chart's default file
POLICIES = ("always-on", "schedule", "idle", "wake", "managed-api")
# Weekdays 08:00-18:00 UTC: the office hours the schedule policy assumes unless told otherwise.
OFFICE_HOURS = Schedule(periods=[Period(begin_time="08:00", end_time="18:00", weekdays=["mon", "tue", "wed", "thu", "fri"])])


@dataclass(frozen=True)
class StartModel:
    """Seconds from a start's request to READY: drawn from recorded starts, else the modeled figure."""

    history_s: tuple[float, ...] = ()
    modeled_s: float = MODELED_START_S
    seed: int = 0
    in_order: bool = False  # the history's starts one after the other (a replay checked against them)

    def drawer(self) -> Callable[[], float]:
        """A seeded draw of one start's seconds (the same sequence for the same seed and history)."""
        if not self.history_s:
            return lambda: self.modeled_s
        history = self.history_s
        if self.in_order:
            taken = itertools.cycle(history)
            return lambda: next(taken)
        rng = random.Random(self.seed)
        return lambda: rng.choice(history)

    @property
    def typical_s(self) -> float:
        """The median recorded start, else the modeled one (the schedule's lead before a period)."""
        return statistics.median(self.history_s) if self.history_s else self.modeled_s

    @property
    def source(self) -> str:
        """Where the start durations come from, in words."""
        if self.history_s:
            return (
                f"drawn from {len(self.history_s)} recorded start{'s' if len(self.history_s) != 1 else ''} "
                f"(median {self.typical_s:.0f} s, seed {self.seed})"
            )
        return f"modeled: {self.modeled_s:.0f} s a start"


@dataclass(frozen=True)
class Settings:
    """What the replay prices and how the controller behaves."""

    hourly_usd: float
    api_input_usd_per_m: float
    api_output_usd_per_m: float
    idle_minutes: float = 30.0
    sweep_s: float = SWEEP_MINUTES * 60.0
    sweep_phase_s: float = 0.0  # the sweep runs at epoch + phase + k x sweep_s
    stop_s: float = MODELED_STOP_S
    start: StartModel = field(default_factory=StartModel)
    schedule: Schedule = OFFICE_HOURS
    span: tuple[datetime, datetime] | None = None  # default: the whole UTC days the trace touches


class PolicyResult(BaseModel):
    """One policy's replay: GPU time, cost over the span and a month, starts, stops and waits."""

    model_config = ConfigDict(frozen=True)

    policy: str
    gpu_hours: float
    cost_usd: float = Field(description="over the trace's span")
    monthly_usd: float = Field(description=f"the span's cost scaled to a month of {HOURS_PER_MONTH:.0f} h")
    starts: int
    stops: int
    served: int
    unserved: int = Field(description="requests not served: outside the schedule, or before READY with nothing holding them")
    waited: int = Field(description="requests held until a start reached READY")
    wait_p50_s: float | None = None
    wait_p95_s: float | None = None
    ratio_to_api: float | None = Field(default=None, description="monthly cost / the managed API's")
    sessions: list[tuple[datetime, datetime]] = Field(
        default_factory=list, description="GPU on, from a start's request to the instance gone"
    )


class Simulation(BaseModel):
    """The trace, the assumptions and every policy's result; the managed API's row is the reference."""

    model_config = ConfigDict(frozen=True)

    span_start: datetime
    span_end: datetime
    span_hours: float
    requests: int
    input_tokens: int
    output_tokens: int
    hourly_usd: float
    api_input_usd_per_m: float
    api_output_usd_per_m: float
    idle_minutes: float
    sweep_minutes: float
    stop_s: float
    start_source: str
    schedule: Schedule
    policies: list[PolicyResult]

    def policy(self, name: str) -> PolicyResult:
        """The result of one policy by name (KeyError names the known ones)."""
        for result in self.policies:
            if result.policy == name:
                return result
        raise KeyError(f"unknown policy {name!r}; allowed values: {', '.join(POLICIES)}")

    def break_even_words(self, name: str) -> str:
        """When the policy would cost what the managed API does, in words."""
        result, api = self.policy(name), self.policy("managed-api")
        if not api.monthly_usd:
            return "the managed API costs nothing for this trace"
        ratio = result.monthly_usd / api.monthly_usd
        if ratio <= 1:
            return f"already cheaper than the API ({ratio:.2f} x its cost)"
        return f"{ratio:,.0f} x this traffic (at the same GPU hours)"


def default_span(requests: Sequence[Request]) -> tuple[datetime, datetime]:
    """The whole UTC days from the first request's to the last request's (at least one day)."""
    first = requests[0].at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    last = requests[-1].at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return first, last + timedelta(days=1)


def simulate(requests: Sequence[Request], settings: Settings) -> Simulation:
    """Replay the requests (in time order, at least one) against every policy."""
    if not requests:
        raise ValueError("no requests to replay")
    begin, end = settings.span or default_span(requests)
    if requests[0].at < begin or requests[-1].at >= end:
        raise ValueError(f"the trace runs from {requests[0].at.isoformat()} to {requests[-1].at.isoformat()}, outside the span")
    span_s = (end - begin).total_seconds()
    month = HOURS_PER_MONTH * 3600 / span_s
    api_usd = sum(_api_usd(r, settings) for r in requests)
    runs = {
        "always-on": _Run(sessions=[(begin.timestamp(), end.timestamp())], served=len(requests)),
        "schedule": _scheduled(requests, settings, begin, end),
        "idle": _on_demand(requests, settings, end.timestamp(), hold=False),
        "wake": _on_demand(requests, settings, end.timestamp(), hold=True),
    }
    results = [run.result(name, settings, month, api_usd) for name, run in runs.items()]
    results.append(
        PolicyResult(
            policy="managed-api",
            gpu_hours=0.0,
            cost_usd=api_usd,
            monthly_usd=api_usd * month,
            starts=0,
            stops=0,
            served=len(requests),
            unserved=0,
            waited=0,
            ratio_to_api=1.0 if api_usd else None,
        )
    )
    return Simulation(
        span_start=begin,
        span_end=end,
        span_hours=span_s / 3600,
        requests=len(requests),
        input_tokens=sum(r.input_tokens for r in requests),
        output_tokens=sum(r.output_tokens for r in requests),
        hourly_usd=settings.hourly_usd,
        api_input_usd_per_m=settings.api_input_usd_per_m,
        api_output_usd_per_m=settings.api_output_usd_per_m,
        idle_minutes=settings.idle_minutes,
        sweep_minutes=settings.sweep_s / 60,
        stop_s=settings.stop_s,
        start_source=settings.start.source,
        schedule=settings.schedule,
        policies=results,
    )


def _api_usd(request: Request, settings: Settings) -> float:
    return (request.input_tokens * settings.api_input_usd_per_m + request.output_tokens * settings.api_output_usd_per_m) / 1e6


@dataclass
class _Run:
    """A policy's replay in epoch seconds."""

    sessions: list[tuple[float, float]] = field(default_factory=list)
    served: int = 0
    unserved: int = 0
    waits: list[float] = field(default_factory=list)
    starts: int = 0
    stops: int = 0

    def result(self, name: str, settings: Settings, month: float, api_usd: float) -> PolicyResult:
        """Priced and summed up."""
        gpu_hours = sum(b - a for a, b in self.sessions) / 3600
        cost = gpu_hours * settings.hourly_usd
        return PolicyResult(
            policy=name,
            gpu_hours=gpu_hours,
            cost_usd=cost,
            monthly_usd=cost * month,
            starts=self.starts,
            stops=self.stops,
            served=self.served,
            unserved=self.unserved,
            waited=len(self.waits),
            wait_p50_s=_percentile(self.waits, 50),
            wait_p95_s=_percentile(self.waits, 95),
            ratio_to_api=cost / api_usd if api_usd else None,
            sessions=[(datetime.fromtimestamp(a, UTC), datetime.fromtimestamp(b, UTC)) for a, b in self.sessions],
        )


def _percentile(values: Sequence[float], q: int) -> float | None:
    """Linear interpolation between closest ranks (as the start timeline's p50/p90); None for none."""
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def _next_sweep(moment: float, settings: Settings) -> float:
    """The first sweep run at or after moment."""
    return math.ceil((moment - settings.sweep_phase_s) / settings.sweep_s) * settings.sweep_s + settings.sweep_phase_s


def _minute_end(moment: float) -> float:
    """The end of the RequestCount minute a request at moment is counted in."""
    return math.floor(moment / METRIC_PERIOD_S) * METRIC_PERIOD_S + METRIC_PERIOD_S


def _on_demand(requests: Sequence[Request], settings: Settings, span_end: float, *, hold: bool) -> _Run:
    """Started by the first request that finds it stopped, stopped by the sweep after the idle window."""
    run = _Run()
    draw = settings.start.drawer()
    window = settings.idle_minutes * 60
    started: float | None = None  # the running session's start request
    ready = quiet = gone = -math.inf  # READY, the idle window's start, the last instance gone
    for request in requests:
        t = request.at.timestamp()
        if started is not None:
            decided = _next_sweep(quiet + window, settings)
            if decided <= t:  # a sweep stopped it before this request came
                gone = decided + settings.stop_s
                run.sessions.append((started, gone))
                run.stops += 1
                started = None
        if started is None:
            started = max(t, gone)  # a stop under way finishes first
            ready = started + draw()
            quiet = ready
            run.starts += 1
        if t >= ready:
            run.served += 1
            quiet = max(quiet, _minute_end(t))
        elif hold:
            run.served += 1
            run.waits.append(ready - t)
            quiet = max(quiet, _minute_end(ready))  # the held request reaches the model at READY
        else:
            run.unserved += 1
    if started is not None:
        decided = _next_sweep(quiet + window, settings)
        if decided < span_end:
            run.stops += 1
        run.sessions.append((started, min(span_end, decided + settings.stop_s)))
    return run


def _scheduled(requests: Sequence[Request], settings: Settings, begin: datetime, end: datetime) -> _Run:
    """Running in the schedule's periods: READY at each period's begin, stopped by the sweep after it."""
    run = _Run()
    periods = schedule_periods(settings.schedule, begin, end)
    lead = settings.start.typical_s
    span = (begin.timestamp(), end.timestamp())
    for a, b in periods:
        on = max(span[0], a.timestamp() - lead)
        off = min(span[1], _next_sweep(b.timestamp(), settings) + settings.stop_s)
        run.sessions.append((on, off))
        run.starts += 1
        run.stops += 1 if b < end else 0
    for request in requests:
        if any(a <= request.at < b for a, b in periods):
            run.served += 1
        else:
            run.unserved += 1
    return run


def schedule_periods(schedule: Schedule, begin: datetime, end: datetime) -> list[tuple[datetime, datetime]]:
    """The running periods of a schedule between begin and end, to the minute (its times are HH:MM)."""
    periods: list[tuple[datetime, datetime]] = []
    opened: datetime | None = None
    moment = begin
    while moment < end:
        running = should_run(schedule, moment)
        if running and opened is None:
            opened = moment
        elif not running and opened is not None:
            periods.append((opened, moment))
            opened = None
        moment += timedelta(minutes=1)
    if opened is not None:
        periods.append((opened, end))
    return periods


def parse_schedule(text: str) -> Schedule:
    """A schedule from "DAYS HH:MM-HH:MM [ZONE]": DAYS is a range (mon-fri), a list (mon,wed) or
    daily; ValueError names the part at fault and what is allowed."""
    parts = text.split()
    if len(parts) not in (2, 3):
        raise ValueError(f"{text!r}: expected DAYS HH:MM-HH:MM [ZONE], e.g. 'mon-fri 08:00-18:00 Europe/Berlin'")
    days, hours = parts[0].lower(), parts[1]
    order = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
    if days == "daily":
        chosen = order
    elif "-" in days:
        first, _, last = days.partition("-")
        if first not in order or last not in order:
            raise ValueError(f"{days!r}: days must be a range of {', '.join(order)} (e.g. mon-fri), a list or daily")
        i, j = order.index(first), order.index(last)
        chosen = order[i : j + 1] if i <= j else order[i:] + order[: j + 1]
    else:
        chosen = days.split(",")
        if any(d not in order for d in chosen):
            raise ValueError(f"{days!r}: days must be a range of {', '.join(order)} (e.g. mon-fri), a list or daily")
    begin, dash, finish = hours.partition("-")
    if not (begin and dash and finish):
        raise ValueError(f"{hours!r}: expected HH:MM-HH:MM, e.g. 08:00-18:00")
    try:
        return Schedule.model_validate(
            {
                "timezone": parts[2] if len(parts) == 3 else "UTC",
                "periods": [{"begin_time": begin, "end_time": finish, "weekdays": chosen}],
            }
        )
    except ValidationError as exc:
        raise ValueError(f"{text!r}: " + "; ".join(f"{e['loc'][-1]}: {e['msg']}" for e in exc.errors())) from None
