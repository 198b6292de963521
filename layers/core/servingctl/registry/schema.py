"""The registry's JSON Schema, committed as registry/schema.json for the Terraform side.

Regenerate with `python -m servingctl.registry.schema > layers/core/servingctl/registry/schema.json`;
a unit test fails when the committed file is stale.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servingctl.registry.models import Registry

SCHEMA_PATH = Path(__file__).with_name("schema.json")


def registry_json_schema() -> dict[str, Any]:
    """Return the JSON Schema of the registry document."""
    schema = Registry.model_json_schema()
    schema["$id"] = "https://servingctl.dev/schemas/registry-v1.json"
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


def render() -> str:
    """Return the schema as the committed file's text."""
    return json.dumps(registry_json_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(render(), end="")
