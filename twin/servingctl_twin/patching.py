"""How the twin touches moto's internals (pinned to moto 5.2.5), and which twin plays each region.

moto emulates the AWS APIs but not AWS's behaviour over time. Each service folder of the twin
(awslambda, autoscaling, cloudwatch, dynamodb, ecs, elbv2, s3, stepfunctions) declares in its `patches` module the
moto attributes it replaces or only reads, each with the parameters its signature must have, and a
comment naming the AWS behaviour it adds. Nothing else in servingctl imports moto internals: when moto
changes, `check_moto()` (and tests/unit/twin/test_patching.py) fail loudly, naming the attribute.

moto's backends live in the process, one per account and region, and a patch replaces a method of a
class, for every caller in the process. So the twin's state is not kept here: each twin claims one
region (`claim`), a `Site` holding each service's part of the twin (target health, scaling activities,
the Lambda router, ...), and a patch reaches the part of the site its backend or request belongs to.
Two twins in one process play two regions and share nothing else but moto's account-wide services
(IAM, S3), where each names its resources by region.
"""

from __future__ import annotations

import importlib
import inspect
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, TypeVar

import moto
from moto.autoscaling.models import AutoScalingBackend, autoscaling_backends
from moto.ecs.models import EC2ContainerServiceBackend, ecs_backends
from moto.elbv2.models import ELBv2Backend, elbv2_backends
from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server

MOTO_VERSION = "5.2.5"
# The account every twin plays (moto's default: what unsigned-for-an-account requests reach).
ACCOUNT_ID = "123456789012"
# The service folders whose `patches` module declares PATCHES (in the order apply() installs them).
SERVICES = ("awslambda", "autoscaling", "cloudwatch", "dynamodb", "ecs", "elbv2", "s3", "servicequotas", "stepfunctions")
T = TypeVar("T")


class MotoVersionError(RuntimeError):
    """The installed moto is not the one these patches were written against."""


@dataclass(frozen=True)
class Patch:
    """One moto attribute the twin replaces (replacement given) or only reads or calls (None), and the
    parameter names its signature must have."""

    label: str
    owner: object
    attr: str
    params: tuple[str, ...]
    replacement: Any = None


def set_missing(model: object, **attributes: Any) -> None:
    """Set attributes AWS answers with and moto's model lacks (its responses serialise them)."""
    for name, value in attributes.items():
        setattr(model, name, value)


def patches() -> list[Patch]:
    """Every service's patches (replaced and used attributes)."""
    found: list[Patch] = [Patch("ThreadedMotoServer._server_entry", ThreadedMotoServer, "_server_entry", ("self",))]
    for service in SERVICES:
        found += importlib.import_module(f"servingctl_twin.{service}.patches").PATCHES
    return found


class _Originals:
    """moto's attributes as they were before apply() replaced them (one record: a class is patched once per process)."""

    def __init__(self) -> None:
        self.by_label: dict[str, Any] = {}
        self.lock = threading.Lock()


_originals = _Originals()


def original(label: str) -> Any:
    """moto's own attribute that the patch labelled label replaced."""
    return _originals.by_label[label]


def check_moto(found: list[Patch] | None = None) -> None:
    """Raise MotoVersionError unless moto is 5.2.5 and every patched/used attribute has its signature."""
    if moto.__version__ != MOTO_VERSION:
        raise MotoVersionError(f"servingctl_twin.patching is pinned to moto {MOTO_VERSION}, found {moto.__version__}")
    for patch in patches() if found is None else found:
        func = _originals.by_label.get(patch.label) or getattr(patch.owner, patch.attr, None)
        if func is None:
            raise MotoVersionError(f"moto {moto.__version__}: {patch.label} is gone")
        params = tuple(inspect.signature(func).parameters)
        if params != patch.params:
            raise MotoVersionError(f"moto {moto.__version__}: {patch.label} has parameters {params}, expected {patch.params}")


def apply() -> None:
    """Install every patch once (idempotent); check_moto() first."""
    with _originals.lock:
        if _originals.by_label:
            return
        found = patches()
        check_moto(found)
        for patch in found:
            if patch.replacement is not None:
                _originals.by_label[patch.label] = getattr(patch.owner, patch.attr)
                setattr(patch.owner, patch.attr, patch.replacement)


def is_applied() -> bool:
    """True once apply() has run."""
    return bool(_originals.by_label)


# ---- sites: which twin plays each region ----------------------------------------------------------
RequestHook = Callable[[dict[str, Any]], tuple[int, dict[str, str], bytes] | None]


class Site:
    """One twin's side of a region of moto's backends: each service's part (created on first use) and
    the hook that may answer a request to the region before moto does (the twin's faults)."""

    def __init__(self, region: str) -> None:
        self.region = region
        self.port: int | None = None  # of the twin's moto server, once it listens
        self.request_hook: RequestHook | None = None
        self._parts: dict[type, Any] = {}
        self._lock = threading.Lock()

    def part(self, kind: type[T]) -> T:
        """This site's instance of a service's state class (made with no arguments on first use)."""
        with self._lock:
            if kind not in self._parts:
                self._parts[kind] = kind()
            found: T = self._parts[kind]
            return found


class _Sites:
    """The claimed regions of this process (moto's backends are process-wide; a twin claims one)."""

    def __init__(self) -> None:
        self.by_region: dict[str, Site] = {}
        self.lock = threading.Lock()


_sites = _Sites()


def claim(region: str) -> Site:
    """A new site for region; RuntimeError when a twin of this process plays it already."""
    with _sites.lock:
        if region in _sites.by_region:
            raise RuntimeError(f"a twin of this process already plays region {region} (moto's backends are process-wide)")
        site = _sites.by_region[region] = Site(region)
        return site


def release(site: Site) -> None:
    """Give the site's region back (its twin stopped)."""
    with _sites.lock:
        if _sites.by_region.get(site.region) is site:
            del _sites.by_region[site.region]


def site_of(region: str) -> Site | None:
    """The site playing region, None when no twin of this process does."""
    with _sites.lock:
        return _sites.by_region.get(region)


def part_of(region: str, kind: type[T]) -> T | None:
    """The part of kind of the site playing region, None when no twin does (a patch then acts as moto)."""
    site = site_of(region)
    return None if site is None else site.part(kind)


def claimed_regions() -> list[str]:
    """The regions twins of this process play."""
    with _sites.lock:
        return sorted(_sites.by_region)


# The moto services whose regional backends a twin fills (reset_region empties them, and Lambda's
# simple backend, which the twin's moto runs without Docker).
TWIN_SERVICES = (
    "autoscaling",
    "cloudformation",
    "cloudwatch",
    "dynamodb",
    "ec2",
    "ecs",
    "elbv2",
    "events",
    "lambda",
    "logs",
    "ssm",
    "stepfunctions",
)


def reset_region(account_id: str, region: str) -> None:
    """Empty moto's backends of account_id/region that a twin fills (moto's reset empties every region)."""
    from moto.awslambda_simple.models import lambda_simple_backends
    from moto.backends import get_backend

    for backend_dict in [*(get_backend(s) for s in TWIN_SERVICES), lambda_simple_backends]:  # type: ignore[call-overload]
        backends_of = backend_dict[account_id]
        if region in backends_of:
            backends_of[region].reset()


def claimed_ports() -> list[int]:
    """The ports of the live twins' moto servers (any of them reaches every region's backends)."""
    with _sites.lock:
        return [site.port for site in _sites.by_region.values() if site.port is not None]


def request_region(environ: dict[str, Any]) -> str:
    """The region a request to the moto server is signed for ('' unsigned)."""
    scope = re.search(r"Credential=[^/]+/[^/]+/([^/]+)/", environ.get("HTTP_AUTHORIZATION", ""))
    return scope.group(1) if scope else ""


# ---- the server ---------------------------------------------------------------------------------
class MotoServer(ThreadedMotoServer):
    """moto's threaded server; a request to a claimed region may first be answered by that site's hook."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(ip_address=host, port=port, verbose=False)

    def _server_entry(self) -> None:
        app = DomainDispatcherApplication(create_backend_app)

        def hooked(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
            # Any server of the process reaches every region's backends (the Step Functions interpreter
            # calls one by MOTO_PORT): the request's region decides whose faults apply.
            site = site_of(request_region(environ))
            answer = site.request_hook(environ) if site is not None and site.request_hook else None
            if answer is None:
                return app(environ, start_response)
            status, headers, body = answer
            start_response(f"{status} {HTTPStatus(status).phrase}", [*headers.items(), ("Content-Length", str(len(body)))])
            return [body]

        self._server = make_server(self._ip_address, self._port, hooked, True, request_handler=MotoRequestHandler)
        self._server_ready_event.set()
        self._server.serve_forever()


@dataclass(frozen=True)
class Backends:
    """moto's backends of one account and region that the world simulator moves."""

    ecs: EC2ContainerServiceBackend
    autoscaling: AutoScalingBackend
    elbv2: ELBv2Backend


def backends(account_id: str, region: str) -> Backends:
    """The ECS, Auto Scaling and ELBv2 backends of account_id/region."""
    return Backends(
        ecs_backends[account_id][region], autoscaling_backends[account_id][region], elbv2_backends[account_id][region]
    )
