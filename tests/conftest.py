"""Fixtures every suite shares: template.yaml as CloudFormation (the roles and policies AWS would
get, used by the template tests and by the twin's IAM coverage test) and the tools that make it.

The SAM translator and asl-validator come from the environments `make test` builds (.venv-sam,
node_modules); when one is missing the tests fail and say which make target builds it.
"""

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "template.yaml"


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C reaches the processes the tests interrupt, however the suite was started."""
    # A suite started in the background by a shell without job control inherits SIGINT ignored, and
    # so would every process it starts: the tests that press Ctrl-C would see nothing interrupted.
    # With Python's own handler here, the processes the tests start begin with the default.
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _tool(env_name: str, default: Path, make_target: str) -> Path:
    path = Path(os.environ.get(env_name) or default)
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make {make_target}` (or set {env_name})")
    return path


@pytest.fixture(scope="session")
def cfn() -> dict:
    """template.yaml after the SAM transform: the roles, policies and functions AWS would get."""
    python = _tool("SERVINGCTL_SAM_PYTHON", ROOT / ".venv-sam/bin/python", "sam-validate")
    script = ROOT / "tests/infra/template/sam_translate.py"
    result = subprocess.run([str(python), str(script), str(TEMPLATE)], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="session")
def asl_validator() -> Path:
    """node_modules/.bin/asl-validator (npm asl-validator, pinned by package-lock.json)."""
    return _tool("SERVINGCTL_ASL_VALIDATOR", ROOT / "node_modules/.bin/asl-validator", "node")


@pytest.fixture(scope="session")
def cloudsplaining() -> Path:
    """The IAM linter's Python (.venv-cloudsplaining, built by mk/iamlint.mk)."""
    return _tool("SERVINGCTL_CLOUDSPLAINING_PYTHON", ROOT / ".venv-cloudsplaining/bin/python", "iam-lint")
