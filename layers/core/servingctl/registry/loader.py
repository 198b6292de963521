"""Load and validate the registry from SSM Parameter Store (cached) or from a local JSON file."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import ValidationError

from servingctl.registry.models import Registry

# Env var naming where the registry lives: "ssm:<parameter name>" or a file path.
REGISTRY_ENV = "SERVINGCTL_REGISTRY"
CACHE_SECONDS = 60
# SSM Parameter Store's value size limits: Standard 4 KB, Advanced 8 KB. Terraform publishes the
# registry with tier Intelligent-Tiering, which moves to Advanced past 4 KB and fails past 8 KB.
SSM_STANDARD_BYTES = 4096
SSM_ADVANCED_BYTES = 8192


class RegistryError(ValueError):
    """The registry document is missing or invalid; the message names the field path."""


def parse_registry(document: str | bytes | dict) -> Registry:
    """Validate a registry document and return the model, or raise RegistryError naming the field."""
    try:
        data = json.loads(document) if isinstance(document, (str, bytes)) else document
    except json.JSONDecodeError as exc:
        raise RegistryError(f"registry is not valid JSON: {exc}") from exc
    try:
        return Registry.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<document>'}: {err['msg']}" for err in exc.errors()
        )
        raise RegistryError(f"invalid registry: {problems}") from exc


def parameter_bytes(data: object) -> int:
    """Size of the document as Terraform's jsonencode stores it in SSM (compact JSON, UTF-8)."""
    return len(json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode())


def check_parameter_size(data: object) -> int:
    """The document's SSM size; RegistryError when it exceeds the Advanced tier's 8 KB limit.

    Applied to documents read from SSM and to the registries the tests publish (the example and the
    Terraform one); a registry file for local use may be larger."""
    size = parameter_bytes(data)
    if size > SSM_ADVANCED_BYTES:
        raise RegistryError(
            f"registry: {size} bytes as an SSM parameter value, over the Advanced tier limit of {SSM_ADVANCED_BYTES} "
            f"bytes (Standard: {SSM_STANDARD_BYTES}); shorten profiles (e.g. serving options) or split the registry"
        )
    return size


def load_registry(source: str | None = None) -> Registry:
    """Load the registry from source ("ssm:<name>" or a file path; default $SERVINGCTL_REGISTRY)."""
    source = source or os.environ.get(REGISTRY_ENV)
    if not source:
        raise RegistryError(f"no registry configured: set {REGISTRY_ENV} to ssm:<parameter name> or a file path")
    if source.startswith("ssm:"):
        from aws_lambda_powertools.utilities import parameters

        value = parameters.get_parameter(source[len("ssm:") :], max_age=CACHE_SECONDS)
        check_parameter_size(json.loads(value))
        return parse_registry(value)
    path = Path(source)
    if not path.is_file():
        raise RegistryError(f"registry file not found: {source}")
    return parse_registry(path.read_text())
