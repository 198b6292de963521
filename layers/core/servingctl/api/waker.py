"""The waker: what a wake-on-request profile's listener rule forwards to while the profile is not READY
(an ALB Lambda target; functions/waker is its thin handler).

Every request gets `503` with an OpenAI-style error body (`{"error": {"message", "type", "code"}}`).
While the profile can wake, the answer carries `Retry-After` (the seconds until the ETA, at most
RETRY_AFTER_MAX_S so SDK clients keep retrying) and the message the full ETA; the first request
starts the profile through the API's own start (servingctl.api.service.start_profile: concurrent
requests name the same execution, so a burst starts it once). A wake is refused, with the reason
and `x-should-retry: false` (the OpenAI SDK's header to stop retrying), when the user's stop asked
for no wake, outside the profile's schedule, once this month's ledger cost reached its budget, or
when that cost cannot be priced (the catalog lacks the pool's or a session's price).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from servingctl.api.models import StartRequest
from servingctl.api.service import ApiDeps, Conflict, start_profile
from servingctl.control.timeline import HISTORY_STARTS, expected_ready, history_offsets, percentile
from servingctl.costs import monthly_totals, stored_session_cost
from servingctl.registry.models import ComputePool, ServingProfile
from servingctl.registry.schedule import should_run
from servingctl.store.models import Phase

# The OpenAI SDK ignores a Retry-After above 60 s (1.x) and refuses one past 120 s (3.x): at most this.
RETRY_AFTER_MAX_S = 60
RETRY_AFTER_MIN_S = 1
# While a stop runs (it must end before a start) and while the rule is being pointed back at the model.
STOPPING_RETRY_S = 15
ROUTING_RETRY_S = 2
# The modeled start without history (seconds on AWS): an instance launched and registered with ECS
# (from the warm pool: started, not launched), the task placed and its image pulled, then the model's
# load as Terraform derived it (LoadEstimate.health_check_grace_s; DEFAULT_LOAD_S when absent).
MODELED_CAPACITY_S = 300
MODELED_WARM_CAPACITY_S = 90
MODELED_TASK_S = 120
DEFAULT_LOAD_S = 900
WAKER = "servingctl-waker"

Code = Literal[
    "model_starting",
    "model_stopping",
    "model_routing",
    "wake_disabled",
    "outside_schedule",
    "over_budget",
    "budget_unpriced",
    "unknown_profile",
]


@dataclass(frozen=True)
class WakeAnswer:
    """The waker's HTTP answer, as an ALB Lambda target returns it (to_alb)."""

    status: int
    code: Code
    message: str
    retry_after_s: int | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        """The OpenAI-style error document."""
        kind = "not_found_error" if self.status == 404 else "service_unavailable_error"
        return {"error": {"message": self.message, "type": kind, "code": self.code}}

    def to_alb(self) -> dict[str, Any]:
        """The Lambda response document an ALB turns into the HTTP answer."""
        headers = {"Content-Type": "application/json", **self.headers}
        if self.retry_after_s is not None:
            headers["Retry-After"] = str(self.retry_after_s)
        else:
            headers["x-should-retry"] = "false"
        reason = {404: "Not Found", 503: "Service Unavailable"}[self.status]
        return {
            "statusCode": self.status,
            "statusDescription": f"{self.status} {reason}",
            "isBase64Encoded": False,
            "headers": headers,
            "body": json.dumps(self.body()),
        }


def retry_after(seconds: float) -> int:
    """Seconds to Retry-After: rounded up, at least 1, at most RETRY_AFTER_MAX_S."""
    return max(RETRY_AFTER_MIN_S, min(RETRY_AFTER_MAX_S, math.ceil(seconds)))


def modeled_start_s(profile: ServingProfile, pool: ComputePool) -> int:
    """Seconds a start takes by the model (no start history): capacity, task, model load."""
    capacity = MODELED_WARM_CAPACITY_S if pool.warm_pool is not None else MODELED_CAPACITY_S
    load = profile.load.health_check_grace_s if profile.load is not None else DEFAULT_LOAD_S
    return capacity + MODELED_TASK_S + load


def eta(deps: ApiDeps, name: str, now: datetime) -> tuple[datetime, str]:
    """When READY comes and how that is known: the running start's timeline against past starts
    (p50), or the modeled start when no past start reached READY."""
    records = deps.store.list_starts(name, limit=HISTORY_STARTS + 1)
    state = deps.store.get_profile(name)
    running = records[-1] if records and records[-1].outcome == "STARTING" and state.phase == Phase.STARTING else None
    history = records[:-1] if running is not None else records
    if running is not None:
        found = expected_ready(running, history, now)
        if found is not None:
            return found, f"p50 of {sum(r.outcome == 'READY' for r in history)} past start(s)"
        begun = running.requested_at
    else:
        offsets = history_offsets(history).get("ready")
        if offsets:
            return now + timedelta(seconds=percentile(offsets, 50)), f"p50 of {len(offsets)} past start(s)"
        begun = now
    spec = deps.registry.profiles[name]
    modeled = modeled_start_s(spec, deps.registry.pools[spec.pool])
    return max(now, begun + timedelta(seconds=modeled)), f"modeled start of {modeled} s (no past start)"


def month_cost_usd(deps: ApiDeps, name: str, now: datetime) -> tuple[float, list[str]]:
    """The profile's ledger cost of sessions started this month (open ones up to now), and the price
    catalog keys it lacks to tell: those of unpriced sessions and the pool's (what a wake would run)."""
    # Stored spans only: a sleeping profile's open session (a failed stop's) bills one instance until closed.
    sessions = deps.store.list_sessions(name)
    costs = [stored_session_cost(deps.catalog, deps.registry.region, s, now) for s in sessions]
    month = now.strftime("%Y-%m")
    total = sum(t["cost_usd"] or 0.0 for (_, m), t in monthly_totals(costs).items() if m == month)
    pool = deps.registry.pools[deps.registry.profiles[name].pool]
    keys = {pool.price_key or pool.instance_type} | {
        s.price_key or s.instance_type for s in sessions if s.started_at.strftime("%Y-%m") == month
    }
    unpriced = sorted(k for k in keys if deps.catalog.instance(deps.registry.region, k) is None)
    return total, unpriced


def refusal(deps: ApiDeps, name: str, spec: ServingProfile, now: datetime) -> WakeAnswer | None:
    """Why a request may not wake the profile now (None: it may)."""
    state = deps.store.get_profile(name)
    how = f"start it with `servingctl start {name}`"
    if state.no_wake:
        who = f" by {state.stopped_by}" if state.stopped_by else ""
        return WakeAnswer(503, "wake_disabled", f"{name} is stopped{who} with --no-wake: requests do not wake it; {how}")
    if spec.schedule is not None and not should_run(spec.schedule, now):
        return WakeAnswer(
            503, "outside_schedule", f"{name} is outside its schedule ({spec.schedule.timezone}): requests do not wake it; {how}"
        )
    budget = spec.wake.monthly_budget_usd if spec.wake is not None else None
    if budget is not None:
        spent, unpriced = month_cost_usd(deps, name, now)
        if unpriced:
            # A budget counted without a price would let every wake through: it refuses instead.
            missing = ", ".join(f"{deps.registry.region}/{key}" for key in unpriced)
            pool = deps.registry.pools[spec.pool]
            return WakeAnswer(
                503,
                "budget_unpriced",
                f"{name}'s wake budget of {budget:g} USD cannot be counted: the price catalog has no {missing} (pool "
                f"{spec.pool}: price_key {pool.price_key or 'unset'}, instance type {pool.instance_type}): requests do not "
                "wake it; add the price to layers/core/servingctl/costs/prices.json (deployed with the functions' layer) "
                f"or set the pool's price_key to a priced key, or {how}",
            )
        if spent >= budget:
            return WakeAnswer(
                503,
                "over_budget",
                f"{name} has cost {spent:.2f} USD this month, its wake budget is {budget:g} USD: requests do not wake it; {how}",
            )
    return None


def profile_for(deps: ApiDeps, headers: Mapping[str, str]) -> str | None:
    """The wake-on-request profile whose routing header the request carries (ALB lowercases names)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    for name, spec in sorted(deps.registry.profiles.items()):
        if (
            spec.wake_on_request
            and lowered.get(spec.routing_header.name.lower(), "").lower() == spec.routing_header.value.lower()
        ):
            return name
    return None


def wake(deps: ApiDeps, headers: Mapping[str, str], request: StartRequest | None = None) -> WakeAnswer:
    """Answer one request that reached the waker, starting its profile (with request: the start's
    pacing) when it may wake."""
    now = deps.clock.now()
    name = profile_for(deps, headers)
    if name is None:
        return WakeAnswer(404, "unknown_profile", "no wake-on-request profile has this request's routing header")
    spec = deps.registry.profiles[name]
    phase = deps.store.get_profile(name).phase
    if phase == Phase.READY:
        return WakeAnswer(503, "model_routing", f"{name} is READY; its route is being switched to it", ROUTING_RETRY_S)
    woken = ""
    if phase != Phase.STARTING:
        refused = refusal(deps, name, spec, now)
        if refused is not None:
            return refused
        try:
            ref = start_profile(deps, name, request or StartRequest(), caller=WAKER)
        except Conflict as exc:
            return WakeAnswer(503, "model_stopping", f"{name} cannot wake yet: {exc.message}", STOPPING_RETRY_S)
        woken = " (joined the start already under way)" if ref.joined else " (woken by this request)"
    ready_at, source = eta(deps, name, now)
    remaining = (ready_at - now).total_seconds()
    after = retry_after(remaining)
    return WakeAnswer(
        503,
        "model_starting",
        f"{name} is starting{woken}: ready at about {ready_at.strftime('%Y-%m-%d %H:%M:%S UTC')} (in {math.ceil(remaining)} s, "
        f"{source}); retry after {after} s",
        after,
    )
