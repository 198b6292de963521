"""Ledger arithmetic: what a serving session cost (uptime x hourly price) and monthly totals."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from servingctl.costs.catalog import PriceCatalog


class SessionCost(BaseModel):
    """One session's uptime and cost; cost is None when the catalog has no price for its instance."""

    model_config = ConfigDict(frozen=True)

    profile: str
    instance_type: str
    started_at: datetime
    ended_at: datetime | None
    uptime_hours: float
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
) -> SessionCost:
    """Cost of one session; an open session accrues until now."""
    end = ended_at or now
    uptime_hours = max(0.0, (end - started_at).total_seconds() / 3600)
    price = catalog.instance(region, price_key or instance_type)
    return SessionCost(
        profile=profile,
        instance_type=instance_type,
        started_at=started_at,
        ended_at=ended_at,
        uptime_hours=uptime_hours,
        hourly_usd=price.hourly_usd if price else None,
        cost_usd=uptime_hours * price.hourly_usd if price else None,
        price_source=price.source if price else None,
    )


def monthly_totals(sessions: Iterable[SessionCost]) -> dict[tuple[str, str], dict[str, float | None]]:
    """Sum uptime and cost per (profile, YYYY-MM of the session start); cost None if any is unpriced."""
    totals: dict[tuple[str, str], dict[str, float | None]] = defaultdict(lambda: {"uptime_hours": 0.0, "cost_usd": 0.0})
    for s in sessions:
        row = totals[(s.profile, s.started_at.strftime("%Y-%m"))]
        row["uptime_hours"] = (row["uptime_hours"] or 0.0) + s.uptime_hours
        row["cost_usd"] = None if row["cost_usd"] is None or s.cost_usd is None else row["cost_usd"] + s.cost_usd
    return dict(totals)
