"""The registry's layout in SSM Parameter Store: one parameter per pool and per profile under a path.

One parameter holds at most 4 KB (Standard) or 8 KB (Advanced) and a profile takes 0.7-0.9 KB, so
the document is split, as Terraform's registry.tf publishes it and the twin does the same:

  <path>/index              {"schema_version", "region", "pools": [names], "profiles": [names]}
  <path>/pools/<name>       one ComputePool
  <path>/profiles/<name>    one ServingProfile

read with GetParametersByPath (recursive, paginated: 10 parameters a page at most). The index
names what must be there, so a missing parameter is told apart from a profile removed on purpose.
assemble() rebuilds the document the one schema (registry/schema.json) describes, and says what
is wrong with each parameter it could not use; parameters() is the inverse (the twin's
servingctl_twin.twin.publish_parameters writes them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servingctl.registry.models import MAX_POOLS, MAX_PROFILES, SCHEMA_VERSION, ComputePool, Name, ServingProfile

INDEX = "index"
POOLS = "pools"
PROFILES = "profiles"
# SSM Parameter Store's value size limits: Standard 4 KB, Advanced 8 KB. Terraform publishes each
# parameter with tier Intelligent-Tiering, which moves to Advanced past 4 KB and fails past 8 KB.
SSM_STANDARD_BYTES = 4096
SSM_ADVANCED_BYTES = 8192


class Index(BaseModel):
    """The index parameter: the document's own fields and the names of its pools and profiles."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = SCHEMA_VERSION
    region: str = Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")
    pools: list[Name] = Field(max_length=MAX_POOLS)
    profiles: list[Name] = Field(max_length=MAX_PROFILES)


@dataclass(frozen=True)
class Problem:
    """What is wrong with one parameter: its full name and the fields at fault."""

    parameter: str
    detail: str

    def __str__(self) -> str:
        return f"{self.parameter}: {self.detail}"


@dataclass(frozen=True)
class Assembled:
    """The document built from every parameter that parses, and the problems of the others."""

    document: dict[str, Any]
    problems: tuple[Problem, ...] = ()
    # Names the index lists (None: the index is missing or malformed, so no name is known to be removed).
    listed: frozenset[str] | None = None
    # Profiles left out because one of their parameters (or their pool's) is at fault, with why.
    unusable: dict[str, str] = field(default_factory=dict)


def compact(value: object) -> str:
    """A value as Terraform's jsonencode stores it (compact JSON, UTF-8)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def parameter_bytes(value: object) -> int:
    """Size of a value as an SSM parameter (compact JSON, UTF-8)."""
    return len(compact(value).encode())


def parameters(document: Mapping[str, Any], path: str) -> dict[str, str]:
    """Full parameter name -> value of a registry document under path (what Terraform publishes)."""
    base = path.rstrip("/")
    index = {
        "schema_version": document.get("schema_version", SCHEMA_VERSION),
        "region": document["region"],
        "pools": sorted(document["pools"]),
        "profiles": sorted(document["profiles"]),
    }
    found = {f"{base}/{INDEX}": compact(index)}
    found |= {f"{base}/{POOLS}/{name}": compact(pool) for name, pool in document["pools"].items()}
    found |= {f"{base}/{PROFILES}/{name}": compact(profile) for name, profile in document["profiles"].items()}
    return found


def _errors(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or '<value>'}: {err['msg']}" for err in exc.errors())


def _parse(name: str, value: str, model: type[BaseModel]) -> tuple[dict[str, Any] | None, str | None]:
    """The parameter's JSON checked against its part of the schema, or what is wrong with it."""
    size = len(value.encode())
    if size > SSM_ADVANCED_BYTES:
        return None, f"{size} bytes, over the Advanced tier limit of {SSM_ADVANCED_BYTES} bytes"
    try:
        data = json.loads(value)
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON: {exc}"
    try:
        model.model_validate(data)
    except ValidationError as exc:
        return None, _errors(exc)
    return data, None


def assemble(path: str, values: Mapping[str, str], region: str) -> Assembled:
    """The document from the parameters under path (names relative to it, as GetParametersByPath
    under that path gives them); region is used when the index is unusable."""
    base = path.rstrip("/")
    problems: list[Problem] = []
    index: dict[str, Any] | None = None
    if INDEX not in values:
        problems.append(Problem(f"{base}/{INDEX}", "missing: the registry is not published under this path"))
    else:
        index, wrong = _parse(INDEX, values[INDEX], Index)
        if wrong:
            problems.append(Problem(f"{base}/{INDEX}", wrong))
    parts: dict[str, dict[str, Any]] = {POOLS: {}, PROFILES: {}}
    unusable: dict[str, str] = {}
    models: dict[str, type[BaseModel]] = {POOLS: ComputePool, PROFILES: ServingProfile}
    for kind in (POOLS, PROFILES):
        present = {key.split("/", 1)[1] for key in values if key.startswith(kind + "/")}
        wanted = set(index[kind]) if index else present
        for name in sorted(wanted):
            parameter = f"{base}/{kind}/{name}"
            if name not in present:
                problems.append(Problem(parameter, f"missing: the index lists {kind[:-1]} {name!r}"))
                if kind == PROFILES:
                    unusable[name] = f"parameter {parameter} is missing"
                continue
            data, wrong = _parse(parameter, values[f"{kind}/{name}"], models[kind])
            if wrong:
                problems.append(Problem(parameter, wrong))
                if kind == PROFILES:
                    unusable[name] = f"parameter {parameter} is malformed: {wrong}"
                continue
            parts[kind][name] = data
    for name, profile in list(parts[PROFILES].items()):
        if profile["pool"] not in parts[POOLS]:
            parameter = f"{base}/{PROFILES}/{name}"
            problems.append(Problem(parameter, f"pool: {profile['pool']!r} is not a usable pool of the registry"))
            unusable[name] = f"its pool {profile['pool']} is missing or malformed in the registry"
            del parts[PROFILES][name]
    document = {"schema_version": SCHEMA_VERSION, "region": index["region"] if index else region, **parts}
    listed = frozenset(index[PROFILES]) if index else None
    return Assembled(document, tuple(problems), listed, unusable)
