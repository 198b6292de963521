"""The cost what-if's chart (matplotlib's object API on the Agg canvas: no pyplot, no display):
monthly cost per policy against the managed API, and when each policy had the GPU on, with the
trace's requests under it."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from servingctl.costs.simulate import Simulation
from servingctl.costs.trace import Request

COLOURS = {"always-on": "tab:red", "schedule": "tab:orange", "idle": "tab:blue", "wake": "tab:green", "managed-api": "tab:gray"}


def simulation_figure(simulation: Simulation, requests: list[Request]) -> Figure:
    """Two panels: monthly USD per policy (the API's as a line), and GPU-on spans over the trace."""
    fig = Figure(figsize=(9.0, 6.5), layout="constrained")
    FigureCanvasAgg(fig)
    costs, timeline = fig.subplots(2, 1, height_ratios=(1, 1.2))
    hosted = [p for p in simulation.policies if p.policy != "managed-api"]
    api = simulation.policy("managed-api")
    names = [p.policy for p in hosted]
    bars = costs.bar(names, [p.monthly_usd for p in hosted], color=[COLOURS[n] for n in names])
    costs.bar_label(bars, labels=[f"{p.monthly_usd:,.0f}" for p in hosted], padding=2)
    costs.axhline(
        api.monthly_usd, color=COLOURS["managed-api"], linestyle="--", label=f"managed API {api.monthly_usd:,.2f} USD/month"
    )
    costs.set_ylabel("USD per month")
    costs.set_title(f"{simulation.requests:,} requests over {simulation.span_hours / 24:.1f} days, priced per month")
    costs.legend(loc="upper right")

    def days(moment: datetime) -> float:
        return (moment - simulation.span_start).total_seconds() / 86400

    for row, policy in enumerate(hosted):
        spans = [(days(a), days(b) - days(a)) for a, b in policy.sessions]
        timeline.broken_barh(spans, (row - 0.35, 0.7), color=COLOURS[policy.policy])
    timeline.plot(
        [days(r.at) for r in requests], [-1] * len(requests), linestyle="none", marker="|", color="black", markersize=10
    )
    timeline.set_yticks(range(-1, len(hosted)), ["requests", *names])
    timeline.set_xlim(0, simulation.span_hours / 24)
    timeline.set_xlabel(f"days from {simulation.span_start:%Y-%m-%d %H:%M} UTC")
    timeline.set_title("GPU on (from a start's request to the instance gone)")
    return fig


def write_simulation_chart(simulation: Simulation, requests: list[Request], path: str | Path) -> Path:
    """Write the chart as PNG and return its path."""
    target = Path(path)
    simulation_figure(simulation, requests).savefig(target, dpi=110)
    return target
