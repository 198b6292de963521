"""The `sam build` output works on its own: each built function imports its handler with nothing on
the path but the function's directory and the built layer (as /var/task and /opt/python in
Lambda), so a dependency missing from layers/core/requirements.txt fails here, not in AWS.

.aws-sam/build is made by `make sam-build` (part of `make test`, before pytest)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cfnlint.decode import decode

ROOT = Path(__file__).resolve().parents[3]
BUILD = ROOT / ".aws-sam/build"
FUNCTIONS = sorted(
    name
    for name, resource in decode(str(ROOT / "template.yaml"))[0]["Resources"].items()
    if resource["Type"] == "AWS::Serverless::Function"
)

# Isolated interpreter (-I: no user site, no PYTHONPATH; -S: no site-packages of the venv), then
# Lambda's path order: the function first, the layer after it.
PROBE = """
import sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import app
assert callable(app.lambda_handler)
print(app.__file__)
"""


@pytest.mark.parametrize("function", FUNCTIONS)
def test_built_function_imports_its_handler_from_the_built_layer_only(function):
    function_dir, layer_dir = BUILD / function, BUILD / "CoreLayer/python"
    if not (function_dir / "app.py").is_file() or not layer_dir.is_dir():
        pytest.fail(f"{BUILD} has no build of {function}: run `make sam-build`")
    env = {
        "PATH": os.environ.get("PATH", ""),
        "AWS_DEFAULT_REGION": "us-east-1",
        "POWERTOOLS_SERVICE_NAME": "servingctl",
        "POWERTOOLS_METRICS_NAMESPACE": "servingctl",
        "POWERTOOLS_TRACE_DISABLED": "1",
        # What every function's settings model requires at Init (template.yaml sets them in AWS).
        "SERVINGCTL_REGISTRY": "ssm:/servingctl/registry",
        "SERVINGCTL_TABLE": "servingctl",
        "SERVINGCTL_BUCKET": "servingctl-records",
        "START_STATE_MACHINE_ARN": "arn:aws:states:us-east-1:123456789012:stateMachine:start",
        "STOP_STATE_MACHINE_ARN": "arn:aws:states:us-east-1:123456789012:stateMachine:stop",
    }
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", PROBE, str(function_dir), str(layer_dir)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(function_dir / "app.py")


def test_layer_holds_the_product_alone():
    layer_dir = BUILD / "CoreLayer/python"
    if not layer_dir.is_dir():
        pytest.fail(f"{BUILD} has no build of the layer: run `make sam-build`")
    shipped = {path.name for path in layer_dir.iterdir()}
    # The product is there; the command line, the twin, their tools and the client-side extras are not.
    assert "servingctl" in shipped
    assert not shipped & {"servingctl_cli", "servingctl_twin", "moto", "uvicorn", "starlette", "rich", "matplotlib", "uvloop"}
    assert not (layer_dir / "servingctl/cli").exists() and not (layer_dir / "servingctl/local").exists()
