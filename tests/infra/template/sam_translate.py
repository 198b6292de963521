"""Translate template.yaml to plain CloudFormation with the SAM translator, printed as JSON.

Run by the tests with the SAM venv's Python (aws-sam-translator pins a pydantic that the main venv
cannot have): `python sam_translate.py template.yaml`. Local CodeUri/ContentUri/DefinitionUri
values are replaced by an S3 location first, as `sam validate` does, because only packaged
templates translate. No AWS call is made: there are no managed policy names to resolve.
"""

import json
import os
import sys

from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

PACKAGED_URI_KEYS = ("CodeUri", "ContentUri", "DefinitionUri")


class _NoManagedPolicies:
    """The template attaches AWS managed policies by ARN only, so the name map stays empty."""

    def load(self) -> dict[str, str]:
        return {}


def main(path: str) -> None:
    """Print the translated template of `path`."""
    with open(path, encoding="utf-8") as handle:
        template = yaml_parse(handle.read())
    for resource in template.get("Resources", {}).values():
        properties = resource.get("Properties") or {}
        for key in PACKAGED_URI_KEYS:
            if isinstance(properties.get(key), str):
                properties[key] = "s3://packaged/" + properties[key].strip("/")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    json.dump(transform(template, {}, _NoManagedPolicies()), sys.stdout, default=str)


if __name__ == "__main__":
    main(sys.argv[1])
