"""Ledger arithmetic: what a serving session cost (uptime x hourly price), monthly totals, and the
standing cost of warm (stopped) instances, which pay for their gp3 volume whether or not anything runs."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict

from servingctl.costs.catalog import PriceCatalog
from servingctl.registry.models import ComputePool, PoolVolume
from servingctl.schema.comparison import HOURS_PER_MONTH, DayUse
from servingctl.store.models import InstanceSpan, Session

# gp3 includes this much throughput and IOPS in its GB-month price; more is billed per unit-month.
GP3_BASELINE_MIBPS = 125
GP3_BASELINE_IOPS = 3000
HOURS_PER_DAY = 24.0


class SessionCost(BaseModel):
    """One session's uptime, the instance time it billed and its cost; cost is None when the catalog
    has no price for its instance."""

    model_config = ConfigDict(frozen=True)

    profile: str
    instance_type: str
    started_at: datetime
    ended_at: datetime | None
    uptime_hours: float
    instances: int = 1
    instance_hours: float
    hourly_usd: float | None
    cost_usd: float | None
    price_source: str | None


def session_cost(
    catalog: PriceCatalog,
    *,
    profile: str,
    region: str,
    instance_type: str,
    started_at: datetime,
    ended_at: datetime | None,
    now: datetime,
    price_key: str | None = None,
    instances: Sequence[InstanceSpan] = (),
) -> SessionCost:
    """Cost of one session; an open session accrues until now. With its instances' spans each bills
    its own time within the session; without (one instance, or a record from before replicas) the
    session's span is one instance's."""
    end = ended_at or now
    uptime_hours = max(0.0, (end - started_at).total_seconds() / 3600)
    instance_hours = (
        sum(max(0.0, (min(i.stopped_at or end, end) - max(i.started_at, started_at)).total_seconds()) for i in instances) / 3600
        if instances
        else uptime_hours
    )
    price = catalog.instance(region, price_key or instance_type)
    return SessionCost(
        profile=profile,
        instance_type=instance_type,
        started_at=started_at,
        ended_at=ended_at,
        uptime_hours=uptime_hours,
        instances=max(1, len(instances)),
        instance_hours=instance_hours,
        hourly_usd=price.hourly_usd if price else None,
        cost_usd=instance_hours * price.hourly_usd if price else None,
        price_source=price.source if price else None,
    )


def stored_session_cost(
    catalog: PriceCatalog, region: str, session: Session, now: datetime, live: Sequence[InstanceSpan] = ()
) -> SessionCost:
    """Cost of a stored session: the instances' spans it keeps once closed, `live` ones while open."""
    return session_cost(
        catalog,
        profile=session.profile,
        region=region,
        instance_type=session.instance_type,
        started_at=session.started_at,
        ended_at=session.stopped_at,
        now=now,
        price_key=session.price_key,
        instances=session.instances if not session.open else live,
    )


def monthly_totals(sessions: Iterable[SessionCost]) -> dict[tuple[str, str], dict[str, float | None]]:
    """Sum uptime and cost per (profile, YYYY-MM of the session start); cost None if any is unpriced."""
    totals: dict[tuple[str, str], dict[str, float | None]] = defaultdict(lambda: {"uptime_hours": 0.0, "cost_usd": 0.0})
    for s in sessions:
        row = totals[(s.profile, s.started_at.strftime("%Y-%m"))]
        row["uptime_hours"] = (row["uptime_hours"] or 0.0) + s.uptime_hours
        row["cost_usd"] = None if row["cost_usd"] is None or s.cost_usd is None else row["cost_usd"] + s.cost_usd
    return dict(totals)


def volume_monthly_usd(catalog: PriceCatalog, region: str, volume: PoolVolume) -> float | None:
    """A gp3 volume's cost a month: size x GB-month, plus throughput above 125 MiB/s and IOPS above
    3000 at their unit-month prices; None when the catalog lacks one of the three for the region."""
    prices = [catalog.infrastructure.get(f"{region}/ebs-gp3-{unit}-month") for unit in ("gb", "mibps", "iops")]
    monthly = [p.monthly_usd if p is not None else None for p in prices]
    if any(m is None for m in monthly):
        return None
    gb, mibps, iops = (float(m or 0.0) for m in monthly)
    return (
        volume.size_gib * gb
        + max(0, volume.throughput_mibps - GP3_BASELINE_MIBPS) * mibps
        + max(0, volume.iops - GP3_BASELINE_IOPS) * iops
    )


def warm_pool_monthly_usd(
    catalog: PriceCatalog, region: str, pool: ComputePool, running_hours: float = HOURS_PER_MONTH
) -> float | None:
    """What a pool's warm pool adds to a month in which the server runs running_hours: the stopped
    instance's volume for the rest of the month (the running price already covers the volume in
    use), and with min_size 1 a spare's volume while it runs. 0 without a warm pool; None unpriced."""
    if pool.warm_pool is None:
        return 0.0
    each = volume_monthly_usd(catalog, region, pool.volume) if pool.volume is not None else None
    if each is None:
        return None
    share = max(0.0, 1 - running_hours / HOURS_PER_MONTH) + (running_hours / HOURS_PER_MONTH if pool.warm_pool.min_size else 0.0)
    return each * share


def day_use(
    sessions: Iterable[tuple[datetime, datetime | None]],
    cold_starts_s: Iterable[float],
    *,
    now: datetime,
    idle_minutes: float,
    window_days: float = 30.0,
) -> DayUse:
    """A day of instance time from the ledger's sessions (start, end; open ones until now) of the
    last `window_days` and the start history's cold starts. Under a day of history the profile is
    assumed always on (24 h, one start a day): a short history says nothing of a day's pattern."""
    spans = [(start, end or now) for start, end in sessions]
    colds = list(cold_starts_s)
    cold = sum(colds) / len(colds) if colds else 0.0
    cold_words = (
        f"cold start {cold:.0f} s (mean of {len(colds)} start{'s' if len(colds) != 1 else ''})"
        if colds
        else "no start history: cold start 0 s"
    )
    first = min((start for start, _ in spans), default=now)
    days = min(window_days, (now - first).total_seconds() / 86400)
    if days < 1.0:
        return DayUse(
            running_hours=HOURS_PER_DAY,
            starts=1.0,
            cold_start_s=cold,
            idle_minutes=idle_minutes,
            source=f"assumed always on, one start a day (under a day of ledger history); {cold_words}",
        )
    since = now - timedelta(days=days)
    hours = sum(max(0.0, (end - max(start, since)).total_seconds()) for start, end in spans if end > since) / 3600
    starts = sum(1 for start, _ in spans if start >= since)
    return DayUse(
        running_hours=min(HOURS_PER_DAY, max(hours / days, 1e-6)),
        starts=starts / days,
        cold_start_s=cold,
        idle_minutes=idle_minutes,
        source=f"ledger: {len(spans)} sessions over {days:.1f} days; {cold_words}",
    )
