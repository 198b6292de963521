"""The twin's ALB (servingctl_twin.elbv2.load_balancers) with real clients: routing by the listener's rules, ALB's
own answers, fail-open, draining, and the AWS/ApplicationELB metrics it publishes from what it proxied.

Targets here are small HTTP servers of the test, registered in a profile's target group through
the elbv2 API (the profile itself is never started), so each ALB behaviour is met on purpose.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from servingctl_twin.elbv2.load_balancers import dimensions_of
from servingctl_twin.twin import Twin
from servingctl_twin.world import Delays

PROFILE = "nemotron-nano"
HEADER = "X-LLM-Profile"


class _Stub(BaseHTTPRequestHandler):
    """/health answers the server's health code; /slow waits `delay` s; /stream writes 10 chunks 0.2 s apart."""

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        server: Any = self.server
        if self.path == "/health":
            server.health_checks += 1
            time.sleep(server.health_delay)
            self._send(server.health_code, b"health")
            return
        server.requests += 1
        if self.path == "/slow":
            time.sleep(server.delay)
        if self.path == "/stream":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for i in range(10):
                self.wfile.write(f"data: {i}\n\n".encode())
                self.wfile.flush()
                time.sleep(0.2)
            return
        self._send(200, b'{"object": "list", "data": []}')

    do_POST = do_GET

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def twin() -> Iterator[Twin]:
    with Twin(time_scale=10, delays=Delays().scaled(0.1)) as running:
        yield running


@pytest.fixture
def stub() -> Iterator[Callable[[], ThreadingHTTPServer]]:
    servers: list[ThreadingHTTPServer] = []

    def make(host: str = "127.0.0.1") -> ThreadingHTTPServer:
        server: Any = ThreadingHTTPServer((host, 0), _Stub)
        server.health_code, server.delay, server.requests, server.health_checks, server.health_delay = 200, 0.0, 0, 0, 0.0
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def group(twin: Twin) -> Iterator[Any]:
    """The profile's target group through the elbv2 API; every target registered here leaves after the test."""
    elbv2, arn = twin.client("elbv2"), twin.registry.profiles[PROFILE].target_group_arn
    registered: list[dict[str, Any]] = []

    class Group:
        def register(self, port: int, host: str = "127.0.0.1") -> None:
            target = {"Id": host, "Port": port}
            elbv2.register_targets(TargetGroupArn=arn, Targets=[target])
            registered.append(target)

        def deregister(self, port: int) -> None:
            elbv2.deregister_targets(TargetGroupArn=arn, Targets=[{"Id": "127.0.0.1", "Port": port}])

        def states(self) -> list[str]:
            found = elbv2.describe_target_health(TargetGroupArn=arn)["TargetHealthDescriptions"]
            return [t["TargetHealth"]["State"] for t in found]

    yield Group()
    assert twin.load_balancers is not None
    for target in registered:  # gone at once (a test that deregistered it left it draining)
        twin.load_balancers.forget(arn, target["Id"])


def _until(what: str, condition: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"never happened: {what}")
        time.sleep(0.05)


def _url(twin: Twin, path: str) -> str:
    return twin.registry.profiles[PROFILE].endpoint_url.rstrip("/") + path


def _sum(twin: Twin, metric: str, dimensions: list[dict[str, str]]) -> tuple[float, list[float]]:
    """The metric's Sum over the last hour, and each datapoint's Sum (after the ALB published what it saw)."""
    assert twin.load_balancers is not None
    twin.load_balancers.flush()
    now = datetime.now(UTC)
    points = twin.client("cloudwatch").get_metric_statistics(
        Namespace="AWS/ApplicationELB",
        MetricName=metric,
        Dimensions=dimensions,
        StartTime=now - timedelta(hours=1),
        EndTime=now + timedelta(minutes=1),
        Period=60,
        Statistics=["Sum"],
    )["Datapoints"]
    return sum(p["Sum"] for p in points), [p["Sum"] for p in points]


def test_every_profile_endpoint_is_its_load_balancer_and_an_unknown_header_gets_the_default_404(twin: Twin) -> None:
    assert twin.registry is not None and twin.load_balancers is not None
    for spec in twin.registry.profiles.values():
        assert spec.endpoint_url == twin.load_balancers.url(spec.load_balancer_arn)
    for headers in ({}, {HEADER: "no-such-profile"}):
        answer = httpx.get(_url(twin, "/v1/models"), headers=headers)
        assert answer.status_code == 404 and answer.json() == {"error": "unknown or missing X-LLM-Profile header"}
    # The profile's rule matches (header values ignore case) but its group has no registered target: 503.
    answer = httpx.get(_url(twin, "/v1/models"), headers={HEADER: PROFILE.upper()})
    assert answer.status_code == 503


def test_request_count_is_every_request_routed_health_checks_excluded(twin: Twin, stub: Any, group: Any) -> None:
    server = stub()
    group.register(server.server_address[1])
    _until("the target is healthy", lambda: group.states() == ["healthy"])
    spec = twin.registry.profiles[PROFILE]
    dimensions = dimensions_of(spec.load_balancer_arn, spec.target_group_arn)
    before, _ = _sum(twin, "RequestCount", dimensions)
    # GET /v1/models is a request vLLM's own counters never see; the ALB counts it.
    sent = [httpx.get(_url(twin, "/v1/models"), headers={HEADER: PROFILE}) for _ in range(5)]
    sent += [httpx.post(_url(twin, "/v1/chat/completions"), headers={HEADER: PROFILE}, json={}) for _ in range(2)]
    assert [a.status_code for a in sent] == [200] * 7
    _until("more health checks", lambda: server.health_checks >= 3)
    after, points = _sum(twin, "RequestCount", dimensions)
    assert after - before == 7 == server.requests
    assert all(p > 0 for p in points)  # no datapoint for a minute without requests
    assert _sum(twin, "HTTPCode_Target_2XX_Count", dimensions)[0] >= 7


def test_request_count_per_target_is_the_groups_requests_over_its_healthy_targets(twin: Twin, stub: Any, group: Any) -> None:
    # Three targets at addresses of their own (as awsvpc tasks have), one failing its health checks.
    servers = [stub(f"127.0.0.{n}") for n in (11, 12, 13)]
    servers[2].health_code = 500  # registered, unhealthy: not counted while others are healthy
    for server in servers:
        group.register(server.server_address[1], server.server_address[0])
    _until("two healthy, one unhealthy", lambda: sorted(group.states()) == ["healthy", "healthy", "unhealthy"])
    # ELB publishes it under the TargetGroup dimension alone (what ALBRequestCountPerTarget reads).
    spec = twin.registry.profiles[PROFILE]
    dimensions = dimensions_of(spec.load_balancer_arn, spec.target_group_arn)[:1]
    before, _ = _sum(twin, "RequestCountPerTarget", dimensions)
    sent = [httpx.get(_url(twin, "/v1/models"), headers={HEADER: PROFILE}) for _ in range(6)]
    assert [a.status_code for a in sent] == [200] * 6
    assert [s.requests for s in servers] == [3, 3, 0]
    after, _ = _sum(twin, "RequestCountPerTarget", dimensions)
    assert after - before == pytest.approx(6 / 2)


def test_all_targets_unhealthy_fail_open(twin: Twin, stub: Any, group: Any) -> None:
    server = stub()
    server.health_code = 500
    group.register(server.server_address[1])
    _until("the target is unhealthy", lambda: group.states() == ["unhealthy"])
    answer = httpx.get(_url(twin, "/v1/models"), headers={HEADER: PROFILE})
    assert answer.status_code == 200 and server.requests == 1


def _resetting_server() -> socket.socket:
    """Accepts and resets every connection (SO_LINGER 0)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()

    def run() -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            conn.recv(65536)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    threading.Thread(target=run, daemon=True).start()
    return sock


def test_a_target_that_resets_or_refuses_gets_a_502(twin: Twin, group: Any) -> None:
    resetting = _resetting_server()
    try:
        group.register(resetting.getsockname()[1])
        # As on AWS, a registration is not routed at once: wait for its health checks to judge it.
        _until("the target is unhealthy", lambda: group.states() == ["unhealthy"])
        answer = httpx.get(_url(twin, "/v1/models"), headers={HEADER: PROFILE})
        assert answer.status_code == 502
    finally:
        resetting.close()
    spec = twin.registry.profiles[PROFILE]
    lb = [{"Name": "LoadBalancer", "Value": spec.load_balancer_arn.split(":loadbalancer/")[-1]}]
    assert _sum(twin, "HTTPCode_ELB_502_Count", lb)[0] >= 1


def test_a_target_silent_past_the_idle_timeout_gets_a_504(twin: Twin, stub: Any, group: Any) -> None:
    spec = twin.registry.profiles[PROFILE]
    elbv2 = twin.client("elbv2")
    server = stub()
    server.delay = 3.0
    group.register(server.server_address[1])
    _until("the target is healthy", lambda: group.states() == ["healthy"])
    elbv2.modify_load_balancer_attributes(
        LoadBalancerArn=spec.load_balancer_arn, Attributes=[{"Key": "idle_timeout.timeout_seconds", "Value": "1"}]
    )
    try:
        assert httpx.get(_url(twin, "/slow"), headers={HEADER: PROFILE}, timeout=30).status_code == 504
        assert httpx.get(_url(twin, "/v1/models"), headers={HEADER: PROFILE}).status_code == 200  # within the timeout
    finally:
        elbv2.modify_load_balancer_attributes(
            LoadBalancerArn=spec.load_balancer_arn, Attributes=[{"Key": "idle_timeout.timeout_seconds", "Value": "300"}]
        )


def test_a_deregistered_target_finishes_its_streams_and_gets_no_new_request(twin: Twin, stub: Any, group: Any) -> None:
    server = stub()
    port = server.server_address[1]
    group.register(port)
    _until("the target is healthy", lambda: group.states() == ["healthy"])
    chunks: list[str] = []
    seen_first = threading.Event()

    def read() -> None:
        with httpx.stream("GET", _url(twin, "/stream"), headers={HEADER: PROFILE}, timeout=30) as answer:
            for line in answer.iter_lines():
                if line:
                    chunks.append(line)
                    seen_first.set()

    reader = threading.Thread(target=read)
    reader.start()
    assert seen_first.wait(10)
    started_with = len(chunks)
    group.deregister(port)  # deregistration delay: 30 s / time scale 10 = 3 s, the stream needs 2 s
    _until(
        "the ALB no longer routes to it",
        lambda: httpx.get(_url(twin, "/v1/models"), headers={HEADER: PROFILE}).status_code == 503,
        timeout_s=5,
    )
    # A deregistration takes a moment to reach the load balancer's nodes on AWS too (the twin looks
    # every 50 ms): a poll sent before that may still have reached the target. From the first 503 on,
    # nothing new reaches it while its stream drains.
    reached = server.requests
    assert [httpx.get(_url(twin, "/v1/models"), headers={HEADER: PROFILE}).status_code for _ in range(5)] == [503] * 5
    reader.join(timeout=30)
    assert chunks == [f"data: {i}" for i in range(10)]
    assert started_with < 10, "the stream had ended before the deregistration: nothing drained"
    assert server.requests == reached, "a request reached the draining target after the ALB had stopped routing to it"


def test_a_busy_target_answering_health_checks_slower_than_the_scaled_interval_stays_healthy(
    twin: Twin, stub: Any, group: Any
) -> None:
    # The group's interval is 15 s, 1.5 s on the twin's clock; its 10 s timeout is the model server's
    # own time, in real seconds: a server answering /health in 3 s (busy, alive) is healthy on AWS.
    server = stub()
    server.health_delay = 3.0
    group.register(server.server_address[1])
    _until("the target is healthy", lambda: group.states() == ["healthy"], timeout_s=30)
    checks = server.health_checks
    _until("six more health checks", lambda: server.health_checks >= checks + 6, timeout_s=60)  # > 4 (the unhealthy threshold)
    assert group.states() == ["healthy"]
