"""Fixtures of the SAM template tests: the template as written (the translated template `cfn` and
the tools come from tests/conftest.py)."""

from pathlib import Path

import pytest
from cfnlint.decode import decode

TEMPLATE = Path(__file__).resolve().parents[3] / "template.yaml"


@pytest.fixture(scope="session")
def template() -> dict:
    """template.yaml as written (SAM), decoded by cfn-lint (short-form intrinsics understood)."""
    decoded, errors = decode(str(TEMPLATE))
    assert not errors, [str(error) for error in errors]
    return decoded
