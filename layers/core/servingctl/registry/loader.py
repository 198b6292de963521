"""Load and validate the registry from SSM Parameter Store (by path, cached) or from a local JSON file.

Lambda reads SSM ("ssm:<path>", registry/layout.py); a file holds the whole document (the CLI's
offline use). read_registry() keeps what parses and names every parameter it could not use, so
the flows that stop GPUs go on from it; load_registry() refuses a registry with any problem.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from servingctl.registry.layout import Problem, assemble
from servingctl.registry.models import ComputePool, Registry, ServingProfile

# The region of a registry in SSM whose index cannot be read, when the reader names none (the
# functions pass their AWS_REGION: servingctl.shared.environment).
DEFAULT_REGION = "us-east-1"


class RegistryError(ValueError):
    """The registry is missing or invalid; the message names each parameter and field at fault."""

    def __init__(self, message: str, problems: tuple[Problem, ...] = ()) -> None:
        super().__init__(message)
        self.problems = problems


@dataclass(frozen=True)
class Published:
    """What the registry's source holds: every pool and profile that parses, and the problems."""

    registry: Registry
    source: str
    problems: tuple[Problem, ...] = ()
    # Profile names the index lists; None when the index could not be read (no profile is then
    # known to be removed on purpose).
    listed: frozenset[str] | None = None
    # Profiles the registry names but that cannot be used as published, with why.
    unusable: dict[str, str] = field(default_factory=dict)

    def strict(self) -> Registry:
        """The registry, or RegistryError naming every problem."""
        if self.problems:
            raise RegistryError(f"registry {self.source}: " + "; ".join(str(p) for p in self.problems), self.problems)
        return self.registry


def _errors(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or '<document>'}: {err['msg']}" for err in exc.errors())


def parse_registry(document: str | bytes | dict[str, Any]) -> Registry:
    """Validate a whole registry document and return the model, or raise RegistryError naming the field."""
    try:
        data = json.loads(document) if isinstance(document, (str, bytes)) else document
    except json.JSONDecodeError as exc:
        raise RegistryError(f"registry is not valid JSON: {exc}") from exc
    try:
        return Registry.model_validate(data)
    except ValidationError as exc:
        raise RegistryError(f"invalid registry: {_errors(exc)}") from exc


def _empty(region: str) -> Registry:
    return Registry(region=region, pools={}, profiles={})


def read_ssm(path: str, region: str) -> Published:
    """Every parameter under path (GetParametersByPath, recursive, every page; cached for
    $POWERTOOLS_PARAMETERS_MAX_AGE seconds, template.yaml's 60); region is the registry's when its
    index cannot be read."""
    from aws_lambda_powertools.utilities import parameters
    from aws_lambda_powertools.utilities.parameters.exceptions import GetParameterError

    base = path.rstrip("/")
    try:
        values = parameters.get_parameters(base, recursive=True)
    except GetParameterError as exc:
        problem = Problem(base, f"could not be read: {exc}")
        return Published(_empty(region), f"ssm:{base}", (problem,))
    built = assemble(base, values, region)
    try:
        registry = Registry.model_validate(built.document)
    except ValidationError as exc:
        # Every part was checked on its own (e.g. one profile past the bound): keep them usable.
        problems = (*built.problems, Problem(base, _errors(exc)))
        parts = {key: built.document[key] for key in ("schema_version", "region")}
        registry = Registry.model_construct(
            **parts,
            pools={n: ComputePool.model_validate(p) for n, p in built.document["pools"].items()},
            profiles={n: ServingProfile.model_validate(p) for n, p in built.document["profiles"].items()},
        )
        return Published(registry, f"ssm:{base}", problems, built.listed, built.unusable)
    return Published(registry, f"ssm:{base}", built.problems, built.listed, built.unusable)


def read_registry(source: str, region: str = DEFAULT_REGION) -> Published:
    """Read the registry from source ("ssm:<path>" or a file path: a function's SERVINGCTL_REGISTRY),
    keeping what parses; a file is all or nothing (RegistryError)."""
    if not source:
        raise RegistryError("no registry configured: SERVINGCTL_REGISTRY must be ssm:<path> or a file path")
    if source.startswith("ssm:"):
        return read_ssm(source[len("ssm:") :], region)
    path = Path(source)
    if not path.is_file():
        raise RegistryError(f"registry file not found: {source}")
    registry = parse_registry(path.read_text())
    return Published(registry, source, listed=frozenset(registry.profiles))


def load_registry(source: str, region: str = DEFAULT_REGION) -> Registry:
    """The registry from source, or RegistryError naming each parameter and field at fault."""
    return read_registry(source, region).strict()
