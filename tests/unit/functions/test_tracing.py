"""X-Ray in the deployed handlers: with tracing on (as in Lambda), each handler's Tracer patches the
AWS SDK and nothing else, so the benchmark client's streamed httpx requests get no subsegments.

The handlers are imported in a fresh interpreter, one after another, with what X-Ray patched noted
after each: aws-xray-sdk patches modules process-wide and cannot undo it, and the twin runs with
tracing disabled, so nothing else would notice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
HANDLERS = sorted(p.parent.name for p in (ROOT / "functions").glob("*/app.py"))

# Imports each handler as Lambda would (tracing enabled), then opens a segment, streams one request
# through the benchmark backend's kind of client (httpx.AsyncClient) to a local server and reports
# what X-Ray patched and recorded.
PROBE = r"""
import asyncio, importlib.util, json, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from aws_xray_sdk.core import patcher, xray_recorder

patched, tracing = {}, {}
for path in sys.argv[1:]:
    name = path.split("/")[-2]
    spec = importlib.util.spec_from_file_location(f"app_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    patched[name], tracing[name] = sorted(patcher._PATCHED_MODULES), not module.tracer.disabled

import httpx

class Answer(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
threading.Thread(target=server.serve_forever, daemon=True).start()

async def stream():
    async with httpx.AsyncClient() as client:
        async with client.stream("GET", f"http://127.0.0.1:{server.server_port}/") as response:
            return b"".join([chunk async for chunk in response.aiter_bytes()]).decode()

segment = xray_recorder.begin_segment("probe")
body = asyncio.run(stream())
xray_recorder.end_segment()
server.shutdown()
print(json.dumps({
    "tracing": tracing,
    "patched": patched,
    "client": f"{httpx.AsyncClient.__module__}.{httpx.AsyncClient.__name__}",
    "subsegments": [s.name for s in segment.subsegments],
    "body": body,
}))
"""


def _probe() -> dict:
    env = {
        **os.environ,
        # What Lambda sets: Powertools enables tracing only inside a Lambda runtime.
        "LAMBDA_TASK_ROOT": str(ROOT / "functions"),
        "AWS_LAMBDA_FUNCTION_NAME": "servingctl-probe",
        "POWERTOOLS_TRACE_DISABLED": "false",
        "AWS_XRAY_CONTEXT_MISSING": "IGNORE_ERROR",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "SERVINGCTL_TABLE": "servingctl",
        "SERVINGCTL_REGISTRY": "ssm:/servingctl/registry",
        # What each function's settings require (servingctl.shared.environment), read at import.
        "SERVINGCTL_BUCKET": "servingctl-records",
        "START_STATE_MACHINE_ARN": "arn:aws:states:us-east-1:123456789012:stateMachine:start",
        "STOP_STATE_MACHINE_ARN": "arn:aws:states:us-east-1:123456789012:stateMachine:stop",
    }
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *(str(ROOT / "functions" / h / "app.py") for h in HANDLERS)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_every_tracer_patches_the_aws_sdk_only_and_streams_get_no_subsegment():
    found = _probe()
    assert found["tracing"] == dict.fromkeys(HANDLERS, True), "the probe must run with tracing enabled, as in Lambda"
    # Noted after each import in turn: the first handler that patches more is the one to fix.
    assert found["patched"] == {h: ["botocore"] for h in HANDLERS}
    assert found["client"] == "httpx.AsyncClient"
    assert found["body"] == "ok" and found["subsegments"] == []
