"""`servingctl endpoint NAME`: how an application calls a profile: the internal ALB's URL, the
routing header and the served model name (GET /profiles/NAME), with a ready-to-paste curl command
and OpenAI Python SDK snippet. The ALB is internal: the snippets work from inside the VPC, or from
outside through one of the ways README's "Reaching the endpoint from outside the VPC" compares.
"""

from __future__ import annotations

import argparse
import json
import shlex
from typing import Any

from servingctl_cli.client import EXIT_OK, Client, add_api_arguments, api_command
from servingctl_cli.main import summary

PROMPT = "Say hello in one short sentence."


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `endpoint`."""
    parser = subparsers.add_parser("endpoint", help=summary("endpoint"))
    parser.add_argument("name", help="profile name from the registry")
    add_api_arguments(parser)
    parser.set_defaults(func=api_command(_endpoint))


def snippets(url: str, header: str, model: str) -> dict[str, str]:
    """The curl command and the OpenAI SDK snippet that call the profile's chat completions."""
    name, _, value = header.partition(": ")
    base = url.rstrip("/") + "/v1"
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 64})
    curl = " \\\n  ".join(
        [
            f"curl -sS {shlex.quote(base + '/chat/completions')}",
            f"-H {shlex.quote(f'{name}: {value}')}",
            "-H 'Content-Type: application/json'",
            f"-d {shlex.quote(body)}",
        ]
    )
    sdk = "\n".join(
        [
            "from openai import OpenAI",
            "",
            f'client = OpenAI(base_url={base!r}, api_key="unused", default_headers={{{name!r}: {value!r}}})',
            f"answer = client.chat.completions.create(model={model!r}, max_tokens=64,",
            f'    messages=[{{"role": "user", "content": {PROMPT!r}}}])',
            "print(answer.choices[0].message.content)",
        ]
    )
    return {"curl": curl, "openai_python": sdk}


def _endpoint(args: argparse.Namespace, client: Client) -> int:
    detail: dict[str, Any] = client.get(f"/profiles/{args.name}")
    url, header, model = detail["endpoint_url"], detail["routing_header"], detail["model"]
    found = snippets(url, header, model)
    if args.json:
        print(
            json.dumps({"name": args.name, "phase": detail.get("phase"), "url": url, "header": header, "model": model, **found})
        )
        return EXIT_OK
    print(f"url     {url}  (internal ALB: reachable from inside the VPC; README: reaching it from outside)")
    print(f"header  {header}")
    print(f"model   {model}")
    if detail.get("phase") != "READY":
        print(f"phase   {detail.get('phase')}: start it first (servingctl start {args.name} --wait)")
    print("\n# curl\n" + found["curl"])
    print("\n# OpenAI Python SDK (pip install openai)\n" + found["openai_python"])
    return EXIT_OK
