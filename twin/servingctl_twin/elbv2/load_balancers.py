"""The twin's Elastic Load Balancing (v2) data plane: every application load balancer in moto's state
is a real reverse proxy on a local port.

Owns what an ALB does with traffic, read from moto's elbv2 state at each request: the listener's
rules by priority (http-header, host-header, path-pattern and http-request-method conditions; forward
and fixed-response actions, the default action last), forwarding to the group's registered targets
(round robin over the healthy ones; all of them when none is healthy: fail-open), streaming the
answer as it comes (SSE is never buffered), ALB's own answers (503 with no registered target, 502
when a target refuses or resets, 504 when it says nothing for the load balancer's idle timeout or
cannot be reached within the 10 s connection timeout), draining (a deregistered target keeps its
in-flight requests for the group's deregistration delay, gets no new one, and is cut after it). Its
health checks follow each group's path, matcher, interval, timeout and thresholds, and are what
DescribeTargetHealth answers. A Lambda target group (the waker) is invoked as ALB invokes one: the
request as the ALB event (httpMethod, path, queryStringParameters, lower-cased headers, body,
isBase64Encoded, requestContext.elb.targetGroupArn), the function's statusCode, headers and body
as the answer, 502 when it fails or answers something else, 503 with no function registered.
It publishes AWS/ApplicationELB metrics per minute from what it
proxied (never from a model server's counters), health checks excluded, nothing for a minute
without requests.

Time: waiting that AWS spends (health check interval, deregistration delay) is divided by the twin's
time scale; what the model server itself takes (a health check's timeout, the idle timeout, the
connection timeout) is in real seconds, as the model server answers in real time: a busy but alive
server is never judged on a clock that runs faster than it does. Targets are reached at their
registered Id:Port (the twin's VPC is a loopback range: a task's ENI address is where its model
server listens).
"""

from __future__ import annotations

import asyncio
import base64
import fnmatch
import itertools
import json
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl

import httpx
import uvicorn

from servingctl_twin.elbv2.patches import TargetHealth

# ALB's connection timeout to a target (not configurable on AWS): past it the client gets a 504.
CONNECT_TIMEOUT_S = 10.0
# The idle timeout when the load balancer has no attribute for it (AWS's default).
DEFAULT_IDLE_TIMEOUT_S = 60.0
METRIC_PERIOD_S = 60
NAMESPACE = "AWS/ApplicationELB"
# Requests per target of a group a minute (ELB: the group's RequestCount over its healthy targets).
PER_TARGET = "RequestCountPerTarget"
# Real seconds between two looks at moto's state (registrations, deregistrations) and between flushes of metrics.
TICK_S = 0.05
FLUSH_S = 1.0
# Hop-by-hop headers a proxy does not forward (RFC 9110 7.6.1), in lower case.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
ELB_PAGE = (
    "<html>\r\n<head><title>{code} {reason}</title></head>\r\n"
    "<body>\r\n<center><h1>{code} {reason}</h1></center>\r\n</body>\r\n</html>\r\n"
)
REASONS = {502: "Bad Gateway", 503: "Service Temporarily Unavailable", 504: "Gateway Time-out"}
# ALB's limit on a Lambda target's request body and response document (1 MB each).
LAMBDA_MAX_BYTES = 1_000_000
# Invoke a Lambda function synchronously: (function ARN, event JSON) -> (payload, FunctionError or None).
LambdaInvoke = Callable[[str, bytes], tuple[bytes, str | None]]


class _Flight:
    """One request in flight to a target; cut() ends it as a deregistration delay's end does."""

    def __init__(self) -> None:
        self.answer: httpx.Response | None = None
        self.cut = False

    async def close(self) -> None:
        self.cut = True
        if self.answer is not None:
            await self.answer.aclose()


class TargetCut(ConnectionError):
    """The target left the group (deregistration delay over) while this request was in flight."""


@dataclass
class _Target:
    """One registered target of one group, as the load balancer sees it."""

    group: str
    target_id: str
    port: int
    state: str = "initial"
    passes: int = 0
    failures: int = 0
    next_check: float = 0.0
    drain_until: float | None = None  # set once deregistered: in-flight requests run until then
    inflight: set[_Flight] = field(default_factory=set)

    @property
    def address(self) -> str:
        return f"http://{self.target_id}:{self.port}"


@dataclass
class _Counts:
    """What one minute of one load balancer (and target group) saw."""

    values: dict[tuple[str, str | None], float] = field(default_factory=lambda: defaultdict(float))
    response_times: dict[str | None, list[float]] = field(default_factory=lambda: defaultdict(list))


class LoadBalancers:
    """Every application load balancer of an elbv2 backend, served on host; start() / stop()."""

    def __init__(
        self,
        backend: Any,
        cloudwatch: Any,
        *,
        host: str = "127.0.0.1",
        time_scale: float = 1.0,
        clock: Callable[[], datetime] | None = None,
        target_health: TargetHealth | None = None,
        invoke: LambdaInvoke | None = None,
        invoke_concurrency: int = 100,
    ) -> None:
        self.backend = backend
        # How a Lambda target group's function is invoked (the twin's Lambda Invoke); None: never asked.
        self.invoke = invoke
        # Invokes run on threads of their own: the loop's default executor (cores + 4 threads) would
        # queue a burst that ALB sends to Lambda at once.
        self._invokers = ThreadPoolExecutor(max_workers=invoke_concurrency, thread_name_prefix="servingctl-alb-invoke")
        # What DescribeTargetHealth answers for this backend's targets (the twin's site's).
        self.target_health = target_health or TargetHealth()
        self.cloudwatch = cloudwatch
        self.host = host
        self.time_scale = time_scale
        # The clock metrics are stamped with (CloudWatch's, which a test may move with the sweep's).
        self.clock = clock or (lambda: datetime.now(UTC))
        self.urls: dict[str, str] = {}
        self._targets: dict[tuple[str, str], _Target] = {}
        self._turn: dict[str, itertools.count[int]] = defaultdict(itertools.count)
        self._minutes: dict[tuple[str, datetime], _Counts] = {}
        self._lock = threading.RLock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._servers: list[uvicorn.Server] = []
        self._ready = threading.Event()
        self._closing: asyncio.Event | None = None
        self.error: BaseException | None = None

    # ---- lifecycle ----------------------------------------------------------------------------
    def start(self) -> LoadBalancers:
        """Listen for every load balancer (one port each) and start checking targets."""
        sockets: dict[str, socket.socket] = {}
        for arn, balancer in self.backend.load_balancers.items():
            if balancer.type != "application":
                continue
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, 0))
            sockets[arn] = sock
            self.urls[arn] = f"http://{self.host}:{sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._run, args=(sockets,), name="servingctl-elbv2", daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the twin's load balancers did not start")
        return self

    def stop(self) -> None:
        """Close every listener, cut what is in flight and publish the last minute's metrics."""
        loop, closing = self._loop, self._closing
        if loop is not None and closing is not None:
            loop.call_soon_threadsafe(closing.set)
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._invokers.shutdown(wait=False, cancel_futures=True)
        self.flush(everything=True)

    def url(self, load_balancer_arn: str) -> str:
        """The listening address of a load balancer."""
        return self.urls[load_balancer_arn]

    def _run(self, sockets: Mapping[str, socket.socket]) -> None:
        try:
            asyncio.run(self._main(sockets))
        except BaseException as exc:
            self.error = exc
            self._ready.set()

    async def _main(self, sockets: Mapping[str, socket.socket]) -> None:
        self._loop = asyncio.get_running_loop()
        self._closing = asyncio.Event()
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
        async with httpx.AsyncClient(limits=limits, trust_env=False) as client, httpx.AsyncClient(trust_env=False) as checker:
            serving = []
            for arn, sock in sockets.items():
                config = uvicorn.Config(
                    self._app(arn, client),
                    log_level="error",
                    lifespan="off",
                    access_log=False,
                    timeout_keep_alive=int(self._idle_timeout(arn)),
                )
                server = uvicorn.Server(config)
                self._servers.append(server)
                serving.append(asyncio.create_task(server.serve(sockets=[sock])))
            watcher = asyncio.create_task(self._watch(checker))
            self._ready.set()
            await self._closing.wait()
            for server in self._servers:
                server.should_exit = True
            watcher.cancel()
            for target in list(self._targets.values()):
                for flight in list(target.inflight):
                    await flight.close()
            await asyncio.gather(*serving, watcher, return_exceptions=True)

    # ---- what the world (ECS) asks ------------------------------------------------------------
    def deregister(self, group: str, target_id: str) -> float:
        """ECS deregisters a stopping task's target: it drains for the group's deregistration delay,
        then leaves the group. Returns the delay in real seconds."""
        delay = self._deregistration_delay(group)
        with self._lock:
            target = self._targets.get((group, target_id))
            if target is None or target.drain_until is not None:
                return delay if target is not None else 0.0
            target.drain_until = time.monotonic() + delay
            target.state = "draining"
        self.target_health.set(
            group, target_id, "draining", "Target.DeregistrationInProgress", "Target deregistration is in progress"
        )
        return delay

    def forget(self, group: str, target_id: str) -> None:
        """The target leaves the group now (deregistered, nothing in flight kept)."""
        tg = self.backend.target_groups.get(group)
        if tg is not None and target_id in tg.targets:
            tg.deregister([{"Id": target_id}])
        with self._lock:
            target = self._targets.pop((group, target_id), None)
        self.target_health.clear(group, target_id)
        if target is not None and self._loop is not None:
            for flight in list(target.inflight):
                asyncio.run_coroutine_threadsafe(flight.close(), self._loop)

    def health(self, group: str, target_id: str) -> str | None:
        """The target's health state as DescribeTargetHealth shows it (None: not registered)."""
        with self._lock:
            target = self._targets.get((group, target_id))
            return target.state if target is not None else None

    # ---- configuration from moto's state -----------------------------------------------------
    def _idle_timeout(self, arn: str) -> float:
        attrs = self.backend.load_balancers[arn].attrs
        return float(attrs.get("idle_timeout.timeout_seconds") or DEFAULT_IDLE_TIMEOUT_S)

    def _deregistration_delay(self, group: str) -> float:
        tg = self.backend.target_groups.get(group)
        seconds = float(tg.attributes.get("deregistration_delay.timeout_seconds", 300)) if tg is not None else 0.0
        return seconds / self.time_scale

    def _rules(self, arn: str) -> list[Any]:
        """The load balancer's HTTP listener rules, by priority, the default rule last."""
        balancer = self.backend.load_balancers[arn]
        listener = next(iter(balancer.listeners.values()), None)
        if listener is None:
            return []
        rules = list(listener.rules.values())
        return sorted((r for r in rules if r.priority != "default"), key=lambda r: int(r.priority)) + [
            r for r in rules if r.priority == "default"
        ]

    # ---- the watcher: registrations, health checks, drains, metrics ----------------------------
    async def _watch(self, checker: httpx.AsyncClient) -> None:
        next_flush = time.monotonic() + FLUSH_S
        checks: set[asyncio.Task[None]] = set()
        while True:
            now = time.monotonic()
            self._sync_registrations(now)
            with self._lock:
                due = [t for t in self._targets.values() if t.drain_until is None and now >= t.next_check]
                for target in due:
                    target.next_check = now + self._interval(target.group)
                ended = [t for t in self._targets.values() if t.drain_until is not None and now >= t.drain_until]
            for target in due:
                check = asyncio.create_task(self._check(checker, target))
                checks.add(check)  # the loop holds tasks weakly: one unreferenced may vanish mid-check
                check.add_done_callback(checks.discard)
            for target in ended:
                self.forget(target.group, target.target_id)
            if now >= next_flush:
                next_flush = now + FLUSH_S
                await asyncio.to_thread(self.flush)
            await asyncio.sleep(TICK_S)

    def _interval(self, group: str) -> float:
        tg = self.backend.target_groups[group]
        return float(tg.health_check_interval_seconds) / self.time_scale

    def _sync_registrations(self, now: float) -> None:
        """New registrations start in initial; a target deregistered through the API drains."""
        with self._lock:
            seen: set[tuple[str, str]] = set()
            for arn, tg in list(self.backend.target_groups.items()):
                if tg.target_type == "lambda":  # invoked per request, never health checked here
                    continue
                for target_id, registered in list(tg.targets.items()):
                    key = (arn, target_id)
                    seen.add(key)
                    if key not in self._targets:
                        self._targets[key] = _Target(arn, target_id, int(registered.get("Port") or tg.port), next_check=now)
                        self.target_health.set(
                            arn, target_id, "initial", "Elb.InitialHealthChecking", "Initial health checks in progress"
                        )
            for key, target in list(self._targets.items()):
                if key not in seen and target.drain_until is None:
                    target.drain_until = now + self._deregistration_delay(target.group)
                    target.state = "draining"

    async def _check(self, checker: httpx.AsyncClient, target: _Target) -> None:
        """One health check as the group configures it; the thresholds move the state."""
        tg = self.backend.target_groups.get(target.group)
        if tg is None:
            return
        port = target.port if tg.health_check_port in (None, "traffic-port") else int(tg.health_check_port)
        matcher = (tg.matcher or {}).get("HttpCode", "200")
        reason = None
        try:
            answer = await checker.get(
                f"http://{target.target_id}:{port}{tg.health_check_path or '/'}", timeout=float(tg.health_check_timeout_seconds)
            )
            if not _matches_code(answer.status_code, matcher):
                reason = ("Target.ResponseCodeMismatch", f"Health checks failed with these codes: [{answer.status_code}]")
        except httpx.TimeoutException:
            reason = ("Target.Timeout", "Request timed out")
        except httpx.HTTPError:
            reason = ("Target.FailedHealthChecks", "Health checks failed")
        with self._lock:
            if self._targets.get((target.group, target.target_id)) is not target or target.drain_until is not None:
                return
            if reason is None:
                target.passes, target.failures = target.passes + 1, 0
                # A new target is healthy after one passed check; an unhealthy one after the threshold.
                needed = 1 if target.state == "initial" else int(tg.healthy_threshold_count)
                if target.state != "healthy" and target.passes >= needed:
                    target.state = "healthy"
                    self.target_health.set(target.group, target.target_id, "healthy")
            else:
                target.passes, target.failures = 0, target.failures + 1
                if target.state != "unhealthy" and target.failures >= int(tg.unhealthy_threshold_count):
                    target.state = "unhealthy"
                    self.target_health.set(target.group, target.target_id, "unhealthy", *reason)

    # ---- the proxy ---------------------------------------------------------------------------
    def _app(self, arn: str, client: httpx.AsyncClient) -> Callable[..., Any]:
        async def app(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
            if scope["type"] != "http":
                return
            await self._handle(arn, client, scope, receive, send)

        return app

    async def _handle(
        self, arn: str, client: httpx.AsyncClient, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]
    ) -> None:
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]
        action = _first_match(self._rules(arn), scope, headers)
        if action is None or action.type != "forward":
            config = (action.data.get("FixedResponseConfig") or {}) if action is not None else {}
            code = int(config.get("StatusCode", 503))
            self._count(arn, None, "HTTP_Fixed_Response_Count")
            self._count(arn, None, f"HTTPCode_ELB_{code // 100}XX_Count")
            await _answer(send, code, config.get("MessageBody", ""), config.get("ContentType") or "text/plain; charset=utf-8")
            return
        group = _forward_group(action.data)
        tg = self.backend.target_groups.get(group)
        if tg is not None and tg.target_type == "lambda":
            await self._invoke(arn, group, [str(t) for t in tg.targets], scope, receive, send, headers)
            return
        target = self._choose(group)
        if target is None:  # no registered target: the ALB answers itself, no target was chosen
            self._elb_error(arn, None, 503)
            await _answer(send, 503, ELB_PAGE.format(code=503, reason=REASONS[503]), "text/html")
            return
        flight = _Flight()
        target.inflight.add(flight)
        try:
            await self._forward(arn, group, target, flight, client, scope, receive, send, headers)
        finally:
            target.inflight.discard(flight)

    def _choose(self, group: str) -> _Target | None:
        """Round robin over the healthy targets; over every routable one when none is healthy (fail-open)."""
        with self._lock:
            routable = [t for (g, _), t in sorted(self._targets.items()) if g == group and t.drain_until is None]
            healthy = [t for t in routable if t.state == "healthy"]
            pool = healthy or routable
            if not pool:
                return None
            return pool[next(self._turn[group]) % len(pool)]

    async def _forward(
        self,
        arn: str,
        group: str,
        target: _Target,
        flight: _Flight,
        client: httpx.AsyncClient,
        scope: dict[str, Any],
        receive: Callable[..., Any],
        send: Callable[..., Any],
        headers: list[tuple[str, str]],
    ) -> None:
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        path = scope.get("raw_path") or scope["path"].encode()
        url = (
            target.address
            + path.decode("latin-1")
            + (("?" + scope["query_string"].decode("latin-1")) if scope.get("query_string") else "")
        )
        client_ip = (scope.get("client") or ("127.0.0.1", 0))[0]
        forwarded = [(k, v) for k, v in headers if k.lower() not in HOP_BY_HOP and not k.lower().startswith("x-forwarded-")]
        forwarded += [("X-Forwarded-For", client_ip), ("X-Forwarded-Proto", "http"), ("X-Forwarded-Port", "80")]
        idle = self._idle_timeout(arn)
        timeout = httpx.Timeout(connect=min(CONNECT_TIMEOUT_S, idle), read=idle, write=idle, pool=None)
        self._count(arn, group, "RequestCount")
        self._count_per_target(arn, group)
        started = time.monotonic()
        request = client.build_request(scope["method"], url, headers=forwarded, content=body, timeout=timeout)
        try:
            answer = await client.send(request, stream=True)
        except httpx.ConnectTimeout:
            await self._elb_answer(arn, group, send, 504)
            return
        except httpx.ReadTimeout:
            await self._elb_answer(arn, group, send, 504)
            return
        except httpx.HTTPError:  # refused, reset or closed before an answer
            await self._elb_answer(arn, group, send, 502)
            return
        flight.answer = answer
        self._response_time(arn, group, time.monotonic() - started)
        self._count(arn, group, f"HTTPCode_Target_{answer.status_code // 100}XX_Count")
        try:
            out = [
                (k.encode("latin-1"), v.encode("latin-1"))
                for k, v in answer.headers.multi_items()
                if k.lower() not in HOP_BY_HOP - {"content-length"}
            ]
            await send({"type": "http.response.start", "status": answer.status_code, "headers": out})
            try:
                async for chunk in answer.aiter_raw():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            except httpx.HTTPError as exc:
                # The answer has begun: the ALB can only close the client's connection (an unfinished body).
                raise TargetCut(f"{target.address}: {type(exc).__name__}") from exc
            if flight.cut:
                raise TargetCut(f"{target.address}: deregistration delay over")
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await answer.aclose()

    async def _invoke(
        self,
        arn: str,
        group: str,
        functions: list[str],
        scope: dict[str, Any],
        receive: Callable[..., Any],
        send: Callable[..., Any],
        headers: list[tuple[str, str]],
    ) -> None:
        """A Lambda target: the request as ALB's event, the function's answer as the response."""
        if not functions or self.invoke is None:  # no function registered: the ALB answers itself
            await self._elb_answer(arn, group, send, 503)
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        if len(body) > LAMBDA_MAX_BYTES:
            await _answer(send, 413, "", "text/plain; charset=utf-8")
            return
        event = lambda_event(group, scope, headers, body)
        self._count(arn, group, "RequestCount")
        started = time.monotonic()
        try:
            invoked = asyncio.get_running_loop().run_in_executor(
                self._invokers, self.invoke, functions[0], json.dumps(event).encode()
            )
            payload, failed = await invoked
            answer = None if failed or len(payload) > LAMBDA_MAX_BYTES else lambda_answer(json.loads(payload))
        except (OSError, ValueError, TypeError, KeyError):
            answer = None
        if answer is None:  # the function failed or answered no valid document: ALB's 502
            await self._elb_answer(arn, group, send, 502)
            return
        code, out, content = answer
        self._response_time(arn, group, time.monotonic() - started)
        self._count(arn, group, f"HTTPCode_Target_{code // 100}XX_Count")
        raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in out.items() if k.lower() != "content-length"]
        raw.append((b"content-length", str(len(content)).encode()))
        await send({"type": "http.response.start", "status": code, "headers": raw})
        await send({"type": "http.response.body", "body": content, "more_body": False})

    async def _elb_answer(self, arn: str, group: str, send: Callable[..., Any], code: int) -> None:
        self._elb_error(arn, group, code)
        await _answer(send, code, ELB_PAGE.format(code=code, reason=REASONS[code]), "text/html")

    # ---- metrics -----------------------------------------------------------------------------
    def _minute(self, arn: str) -> _Counts:
        stamp = self.clock().replace(second=0, microsecond=0)
        with self._lock:
            return self._minutes.setdefault((arn, stamp), _Counts())

    def _count(self, arn: str, group: str | None, metric: str) -> None:
        counts = self._minute(arn)
        with self._lock:
            counts.values[(metric, None)] += 1
            if group is not None and metric != "HTTP_Fixed_Response_Count":
                counts.values[(metric, group)] += 1

    def _count_per_target(self, arn: str, group: str) -> None:
        """RequestCountPerTarget as ELB documents it: the group's requests divided by its healthy
        targets (by every registered one when none is healthy); not for Lambda targets. Each request
        the ALB forwards adds 1 / the targets it counted then, so a minute sums to its share per target."""
        with self._lock:
            registered = [t for (g, _), t in self._targets.items() if g == group]
            healthy = sum(1 for t in registered if t.state == "healthy")
        counts = self._minute(arn)
        with self._lock:
            counts.values[(PER_TARGET, group)] += 1 / max(1, healthy or len(registered))

    def _elb_error(self, arn: str, group: str | None, code: int) -> None:
        # ELB's own 5XX: per load balancer (AWS publishes them without a TargetGroup dimension).
        for metric in ("HTTPCode_ELB_5XX_Count", f"HTTPCode_ELB_{code}_Count"):
            counts = self._minute(arn)
            with self._lock:
                counts.values[(metric, None)] += 1

    def _response_time(self, arn: str, group: str, seconds: float) -> None:
        counts = self._minute(arn)
        with self._lock:
            counts.response_times[None].append(seconds)
            counts.response_times[group].append(seconds)

    def flush(self, everything: bool = False) -> None:
        """Publish the counts of every minute gathered so far (what is new since the last flush), with
        AWS's dimensions; a minute without requests publishes nothing."""
        with self._lock:
            minutes, self._minutes = self._minutes, {}
        for (arn, stamp), counts in minutes.items():
            data = []
            balancer = arn.split(":loadbalancer/", 1)[-1]
            for (metric, group), value in counts.values.items():
                data.append(
                    {
                        "MetricName": metric,
                        "Value": value,
                        "Unit": "Count",
                        "Timestamp": stamp,
                        # ELB publishes RequestCountPerTarget under TargetGroup alone.
                        "Dimensions": _dimensions(balancer, group)[:1] if metric == PER_TARGET else _dimensions(balancer, group),
                    }
                )
            for group, times in counts.response_times.items():
                data.append(
                    {
                        "MetricName": "TargetResponseTime",
                        "Unit": "Seconds",
                        "Timestamp": stamp,
                        "StatisticValues": {
                            "SampleCount": len(times),
                            "Sum": sum(times),
                            "Minimum": min(times),
                            "Maximum": max(times),
                        },
                        "Dimensions": _dimensions(balancer, group),
                    }
                )
            for start in range(0, len(data), 500):
                self.cloudwatch.put_metric_data(Namespace=NAMESPACE, MetricData=data[start : start + 500])


def _dimensions(balancer: str, group: str | None) -> list[dict[str, str]]:
    found = [{"Name": "LoadBalancer", "Value": balancer}]
    if group is not None:
        found.insert(0, {"Name": "TargetGroup", "Value": group.split(":")[-1]})
    return found


def lambda_event(group: str, scope: Mapping[str, Any], headers: list[tuple[str, str]], body: bytes) -> dict[str, Any]:
    """The event ALB sends a Lambda target (multi-value headers off): header names in lower case, the
    last value of a repeated one, the X-Forwarded-* it adds; a body that is not UTF-8 text in base64."""
    query = scope.get("query_string") or b""
    client_ip = (scope.get("client") or ("127.0.0.1", 0))[0]
    given = {k.lower(): v for k, v in headers if not k.lower().startswith("x-forwarded-")}
    given |= {"x-forwarded-for": client_ip, "x-forwarded-proto": "http", "x-forwarded-port": "80"}
    try:
        text, encoded = body.decode("utf-8"), False
    except UnicodeDecodeError:
        text, encoded = base64.b64encode(body).decode(), True
    return {
        "requestContext": {"elb": {"targetGroupArn": group}},
        "httpMethod": scope["method"],
        "path": scope["path"],
        "queryStringParameters": dict(parse_qsl(query.decode("latin-1"), keep_blank_values=True)),
        "headers": given,
        "body": text,
        "isBase64Encoded": encoded,
    }


def lambda_answer(document: Any) -> tuple[int, dict[str, str], bytes] | None:
    """(status, headers, body) of a Lambda target's response document; None when ALB would answer 502
    (not an object, or no integer statusCode)."""
    if not isinstance(document, dict) or not isinstance(document.get("statusCode"), int):
        return None
    headers = {str(k): str(v) for k, v in (document.get("headers") or {}).items()}
    body = document.get("body") or ""
    content = base64.b64decode(body) if document.get("isBase64Encoded") else str(body).encode()
    return int(document["statusCode"]), headers, content


def _matches_code(code: int, matcher: str) -> bool:
    """A health check matcher: codes and ranges, e.g. "200", "200,202", "200-299"."""
    for part in matcher.split(","):
        low, _, high = part.strip().partition("-")
        if int(low) <= code <= int(high or low):
            return True
    return False


def _wildcard(pattern: str, value: str, case: bool = False) -> bool:
    """ALB's condition match: * and ? wildcards; header and host values ignore case."""
    return fnmatch.fnmatchcase(value if case else value.lower(), pattern if case else pattern.lower())


def _first_match(rules: list[Any], scope: dict[str, Any], headers: list[tuple[str, str]]) -> Any:
    """The first action of the first rule (by priority) whose conditions all hold."""
    for rule in rules:
        if all(_holds(c, scope, headers) for c in rule.conditions):
            return rule.actions[0] if rule.actions else None
    return None


def _holds(condition: Mapping[str, Any], scope: dict[str, Any], headers: list[tuple[str, str]]) -> bool:
    """One rule condition against the request (any of its values matches)."""
    field_name = condition.get("Field")
    if field_name == "http-header":
        config = condition.get("HttpHeaderConfig") or {}
        name = str(config.get("HttpHeaderName", "")).lower()
        given = [v for k, v in headers if k.lower() == name]
        return any(_wildcard(p, v) for p in config.get("Values", []) for v in given)
    if field_name == "host-header":
        values = (condition.get("HostHeaderConfig") or {}).get("Values") or condition.get("Values", [])
        host = next((v for k, v in headers if k.lower() == "host"), "").split(":")[0]
        return any(_wildcard(p, host) for p in values)
    if field_name == "path-pattern":
        values = (condition.get("PathPatternConfig") or {}).get("Values") or condition.get("Values", [])
        return any(_wildcard(p, scope["path"], case=True) for p in values)
    if field_name == "http-request-method":
        return scope["method"] in (condition.get("HttpRequestMethodConfig") or {}).get("Values", [])
    raise ValueError(
        f"listener rule condition {field_name!r}: the twin's ALB plays http-header, host-header, "
        "path-pattern and http-request-method"
    )


def _forward_group(data: Mapping[str, Any]) -> str:
    """The target group a forward action sends to (the first of a ForwardConfig's groups)."""
    if data.get("TargetGroupArn"):
        return str(data["TargetGroupArn"])
    groups = (data.get("ForwardConfig") or {}).get("TargetGroups") or []
    return str(groups[0]["TargetGroupArn"])


async def _answer(send: Callable[..., Any], code: int, body: str, content_type: str) -> None:
    payload = body.encode()
    await send(
        {
            "type": "http.response.start",
            "status": code,
            "headers": [(b"content-type", content_type.encode()), (b"content-length", str(len(payload)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": payload, "more_body": False})


def dimensions_of(load_balancer_arn: str, target_group_arn: str) -> list[dict[str, str]]:
    """The (TargetGroup, LoadBalancer) dimensions AWS publishes a target group's metrics under."""
    return _dimensions(load_balancer_arn.split(":loadbalancer/", 1)[-1], target_group_arn)
