"""Costs: the price catalog, the session ledger and the self-hosted vs managed API comparison."""

from servingctl.costs.catalog import CatalogError, PriceCatalog, load_catalog, priced_api
from servingctl.costs.compare import compare, cost_comparisons, slo_cost, slo_cost_of
from servingctl.costs.ledger import (
    SessionCost,
    day_use,
    monthly_totals,
    session_cost,
    stored_session_cost,
    volume_monthly_usd,
    warm_pool_monthly_usd,
)
from servingctl.schema.comparison import CompareInput, Comparison

__all__ = [
    "CatalogError",
    "CompareInput",
    "Comparison",
    "PriceCatalog",
    "SessionCost",
    "compare",
    "cost_comparisons",
    "day_use",
    "load_catalog",
    "monthly_totals",
    "priced_api",
    "session_cost",
    "slo_cost",
    "slo_cost_of",
    "stored_session_cost",
    "volume_monthly_usd",
    "warm_pool_monthly_usd",
]
