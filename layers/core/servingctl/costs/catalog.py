"""The price catalog: on-demand instance, infrastructure and managed-API prices as data.

Every entry carries its source and date. The packaged prices.json is the default; a user file
(`SERVINGCTL_PRICES` or `--prices FILE`) overrides entries key by key.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servingctl.schema.comparison import Comparison


class _Priced(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(min_length=1)
    as_of: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")
    estimate: bool = False


class InstancePrice(_Priced):
    """On-demand price of one instance type in one region."""

    hourly_usd: float = Field(gt=0)


class InfrastructurePrice(_Priced):
    """A metered infrastructure price (per hour, per GB or per GB-month)."""

    hourly_usd: float | None = Field(default=None, ge=0)
    per_gb_usd: float | None = Field(default=None, ge=0)
    monthly_usd: float | None = Field(default=None, ge=0)


class ManagedApiPrice(_Priced):
    """A managed API's price per million input and output tokens."""

    input_usd_per_m: float = Field(ge=0)
    output_usd_per_m: float = Field(ge=0)


class PriceCatalog(BaseModel):
    """The whole catalog; instance keys are "<region>/<instance type or price key>"."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    currency: str = "USD"
    instances: dict[str, InstancePrice] = Field(default_factory=dict)
    infrastructure: dict[str, InfrastructurePrice] = Field(default_factory=dict)
    managed_apis: dict[str, ManagedApiPrice] = Field(default_factory=dict)
    default_managed_api: str | None = None

    def instance(self, region: str, key: str) -> InstancePrice | None:
        """Return the price of an instance type (or price key) in a region, None when unknown."""
        return self.instances.get(f"{region}/{key}")

    def managed_api(self, name: str | None = None) -> ManagedApiPrice:
        """Return a managed API's prices (the default one when name is None); KeyError names the known ones."""
        key = name or self.default_managed_api
        if key not in self.managed_apis:
            raise KeyError(f"unknown managed API {key!r}; allowed values: {', '.join(sorted(self.managed_apis))}")
        return self.managed_apis[key]


class CatalogError(ValueError):
    """A price file is unreadable or invalid; the message names the entry and field."""


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for section in ("instances", "infrastructure", "managed_apis"):
        merged[section] = {**base.get(section, {}), **override.get(section, {})}
    for key in ("currency", "default_managed_api"):
        if key in override:
            merged[key] = override[key]
    return merged


def load_catalog(override_path: str | os.PathLike[str] | None = None) -> PriceCatalog:
    """Load the packaged catalog, overridden by the price file at override_path when given (the
    CLI's --prices, default $SERVINGCTL_PRICES)."""
    data = json.loads(resources.files("servingctl.costs").joinpath("prices.json").read_text())
    path = override_path
    if path:
        try:
            override = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise CatalogError(f"price file {path}: {exc}") from exc
        data = _merge(data, override)
    try:
        return PriceCatalog.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise CatalogError(f"invalid price catalog: {problems}") from exc


def priced_api(comparisons: Mapping[str, Comparison] | None) -> str | None:
    """The packaged catalog's managed API the comparisons priced (a run's share one API), by its per-1M
    input/output prices: None when none has them or the catalog does not load (a comparison carries
    prices, not the API's name)."""
    if not comparisons:
        return None
    inputs = next(iter(comparisons.values())).inputs
    prices = (inputs.api_input_usd_per_m, inputs.api_output_usd_per_m)
    try:
        apis = load_catalog().managed_apis
    except CatalogError:
        return None
    return next((key for key, p in apis.items() if (p.input_usd_per_m, p.output_usd_per_m) == prices), None)
