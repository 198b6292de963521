"""EventBridge's part in the local twin, as template.yaml declares it, and one Step Functions behaviour moto lacks.

- The sweep's schedule (SweepSchedule: its rate() and its Input), its period divided by the twin's
  time scale, invoking the sweep function.
- The rule on "Step Functions Execution Status Change" (FlowEndedRule: its EventPattern, with the
  state machine references resolved to the twin's ARNs): every execution status change of the three
  machines is turned into the event Step Functions sends (shape from AWS's EventBridge reference:
  version, id, detail-type, source aws.states, account, time, region, resources and a detail with
  what DescribeExecution says), and those the pattern matches are delivered to the sweep function.
- Stopping an execution stops the child a `states:startExecution.sync` Task of it started and is
  still waiting for (Step Functions does; moto does not).

Deliveries run as Lambda runs the sweep function's asynchronous invocations: at once (each in an
execution environment of its own), or one at a time when the template reserves it a concurrency of
1; the twin reads the template under its parameters' defaults (ReservedConcurrency "off": at once).
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from servingctl_twin import iam

STATUS_CHANGE = "Step Functions Execution Status Change"
SCHEDULE, RULE, FUNCTION = "SweepSchedule", "FlowEndedRule", "SweepFunction"
RATE_UNITS_S = {"minute": 60, "minutes": 60, "hour": 3600, "hours": 3600, "day": 86400, "days": 86400}
POLL_S = 0.2  # real seconds between looks at the executions' statuses

log = logging.getLogger(__name__)


class _TemplateLoader(yaml.SafeLoader):
    """Reads CloudFormation's short-form intrinsics (!Ref X -> {"Ref": "X"}, !GetAtt A.B -> {"Fn::GetAtt": [A, B]})."""


def _intrinsic(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    elif isinstance(node, yaml.MappingNode):
        value = loader.construct_mapping(node, deep=True)
    else:  # yaml has no other kind of node
        raise yaml.constructor.ConstructorError(None, None, f"!{suffix}: unexpected {type(node).__name__}", node.start_mark)
    if suffix == "Ref":
        return {"Ref": value}
    if suffix == "GetAtt" and isinstance(value, str):
        value = value.split(".", 1)
    return {f"Fn::{suffix}": value}


_TemplateLoader.add_multi_constructor("!", _intrinsic)


def load_template(template: Path) -> dict[str, Any]:
    """template.yaml as a document, its short-form intrinsics in long form."""
    document: dict[str, Any] = yaml.load(template.read_text(), Loader=_TemplateLoader)
    return document


@dataclass(frozen=True)
class Wiring:
    """The schedule and the rule of template.yaml, with the twin's ARNs in place of the references."""

    rate_s: float
    schedule_input: dict[str, Any]
    pattern: dict[str, Any]
    concurrency: int | None = None  # the sweep function's reserved concurrency (None: unreserved)


def rate_seconds(expression: str) -> float:
    """Seconds of an EventBridge Scheduler rate(N unit) expression (the twin plays no cron())."""
    found = re.fullmatch(r"rate\((\d+) (\w+)\)", expression.strip())
    if not found or found.group(2) not in RATE_UNITS_S:
        raise ValueError(f"ScheduleExpression: {expression!r} is not rate(N minutes|hours|days); the twin plays rate() only")
    return int(found.group(1)) * RATE_UNITS_S[found.group(2)]


def read_wiring(template: Path, machines: Mapping[str, str]) -> Wiring:
    """The sweep's schedule and status-change rule from template.yaml; machines: ASL file stem -> twin ARN."""
    document = load_template(template)
    resources = document["Resources"]
    by_logical_id = {
        name: machines[Path(r["Properties"]["DefinitionUri"]).name.removesuffix(".asl.json")]
        for name, r in resources.items()
        if r["Type"] == "AWS::Serverless::StateMachine"
    }

    def resolve(value: Any) -> Any:
        if isinstance(value, dict) and set(value) == {"Ref"}:
            return by_logical_id[value["Ref"]]
        if isinstance(value, dict):
            return {k: resolve(v) for k, v in value.items()}
        if isinstance(value, list):
            return [resolve(v) for v in value]
        return value

    schedule = resources[SCHEDULE]["Properties"]
    return Wiring(
        rate_s=rate_seconds(schedule["ScheduleExpression"]),
        schedule_input=json.loads(schedule["Target"]["Input"]),
        pattern=resolve(resources[RULE]["Properties"]["EventPattern"]),
        concurrency=reserved_concurrency(document),
    )


def reserved_concurrency(document: Mapping[str, Any]) -> int | None:
    """The sweep function's ReservedConcurrentExecutions under the parameters' defaults (None: none)."""
    defaults = {name: p.get("Default") for name, p in (document.get("Parameters") or {}).items()}
    conditions = iam.evaluate_conditions(document, defaults)
    value = document["Resources"][FUNCTION]["Properties"].get("ReservedConcurrentExecutions", {"Ref": "AWS::NoValue"})
    found = iam.resolve([value], defaults, conditions)  # in a list: AWS::NoValue drops out
    return int(found[0]) if found else None


def matches(pattern: Mapping[str, Any], event: Mapping[str, Any]) -> bool:
    """EventBridge matching for the pattern forms the template uses: a list of allowed values, or a nested object."""
    for key, wanted in pattern.items():
        value = event.get(key)
        if isinstance(wanted, dict):
            if not isinstance(value, dict) or not matches(wanted, value):
                return False
        elif value not in wanted:
            return False
    return True


def _millis(value: Any) -> int | None:
    return int(value.timestamp() * 1000) if isinstance(value, datetime) else None


def status_change(describe: Mapping[str, Any], region: str, account: str) -> dict[str, Any]:
    """The event Step Functions puts on the default bus for the execution DescribeExecution describes."""
    arn = describe["executionArn"]
    detail = {
        "executionArn": arn,
        "stateMachineArn": describe["stateMachineArn"],
        "name": describe["name"],
        "status": describe["status"],
        "startDate": _millis(describe.get("startDate")),
        "stopDate": _millis(describe.get("stopDate")),
        "input": describe.get("input"),
        "inputDetails": {"included": True},
        "output": describe.get("output"),
        "outputDetails": {"included": True} if describe.get("output") is not None else None,
    }
    detail |= {k: describe[k] for k in ("error", "cause") if describe.get(k) is not None}
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": STATUS_CHANGE,
        "source": "aws.states",
        "account": account,
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [arn],
        "detail": detail,
    }


@dataclass
class Delivery:
    """One invocation of the sweep function by the schedule or the rule."""

    kind: str  # "schedule" or "status-change"
    event: dict[str, Any]
    queued: float = field(default_factory=time.monotonic)
    started: float | None = None  # when the function was invoked (the queue may hold it a while)
    done: float | None = None
    answer: Any = None
    error: str | None = None


class EventBridge:
    """The schedule, the rule and the parent-to-child aborts; start() / stop() (one thread each)."""

    def __init__(
        self,
        sfn: Any,
        wiring: Wiring,
        invoke: Callable[[bytes], tuple[bytes, str | None]],
        *,
        region: str,
        account: str,
        time_scale: float,
        deliver: bool,
    ) -> None:
        self.sfn = sfn
        self.wiring = wiring
        self.invoke = invoke
        self.region, self.account = region, account
        self.interval_s = wiring.rate_s / time_scale
        self.deliver = deliver  # False: only the child aborts (the twin's control loop is off)
        self.deliveries: list[Delivery] = []
        self.machines = sorted(set(wiring.pattern.get("detail", {}).get("stateMachineArn", [])))
        self._statuses: dict[str, str] = {}
        self._queue: queue.Queue[Delivery | None] = queue.Queue()
        self._stop = threading.Event()
        # Deliveries in progress and holds (held()); a delivery starts when nothing holds and a slot is free.
        self._slots = threading.Condition()
        self._active = self._holds = 0
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        """Start watching (and, when delivering, the schedule and the function's one-at-a-time queue)."""
        targets = [self._watch] + ([self._schedule, self._work] if self.deliver else [])
        self._threads = [threading.Thread(target=t, name=f"servingctl-eventbridge-{t.__name__}", daemon=True) for t in targets]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Stop every thread (deliveries in progress finish first)."""
        self._stop.set()
        self._queue.put(None)
        for thread in self._threads:
            thread.join(timeout=60)
        with self._slots:
            self._slots.wait_for(lambda: self._active == 0, timeout=60)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """No delivery runs inside (those in progress finish first; those due wait in the queue), so
        a test can change the world in several calls and the next sweep sees all of them."""
        with self._slots:
            self._holds += 1
            self._slots.wait_for(lambda: self._active == 0)
        try:
            yield
        finally:
            with self._slots:
                self._holds -= 1
                self._slots.notify_all()

    def deliveries_of(self, kind: str) -> list[Delivery]:
        """The deliveries of one kind, oldest first."""
        return [d for d in list(self.deliveries) if d.kind == kind]

    def _enqueue(self, kind: str, event: dict[str, Any]) -> None:
        delivery = Delivery(kind, event)
        self.deliveries.append(delivery)
        self._queue.put(delivery)

    def _schedule(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._enqueue("schedule", dict(self.wiring.schedule_input))

    def _work(self) -> None:
        """Hand each delivery, in order, to an invocation of its own once a slot is free."""
        limit = self.wiring.concurrency
        while (delivery := self._queue.get()) is not None:
            with self._slots:
                self._slots.wait_for(lambda: self._holds == 0 and (limit is None or self._active < limit))
                self._active += 1
            threading.Thread(target=self._deliver, args=(delivery,), name="servingctl-eventbridge-delivery", daemon=True).start()

    def _deliver(self, delivery: Delivery) -> None:
        try:
            delivery.started = time.monotonic()
            payload, error = self.invoke(json.dumps(delivery.event).encode())
            delivery.answer, delivery.error, delivery.done = json.loads(payload or b"null"), error, time.monotonic()
            if error:
                log.warning("sweep %s delivery failed: %s", delivery.kind, payload[:500])
        finally:
            with self._slots:
                self._active -= 1
                self._slots.notify_all()

    def _watch(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                self._look()
            except Exception:  # keep watching; moto answers again on the next look
                log.exception("eventbridge: looking at the executions failed")

    def _look(self) -> None:
        for machine in self.machines:
            for page in self.sfn.get_paginator("list_executions").paginate(stateMachineArn=machine):
                for item in page["executions"]:
                    arn, status = item["executionArn"], item["status"]
                    if self._statuses.get(arn) == status:
                        continue
                    self._statuses[arn] = status
                    if status == "ABORTED":
                        self._abort_children(arn)
                    describe = self.sfn.describe_execution(executionArn=arn)
                    event = status_change(describe, self.region, self.account)
                    if self.deliver and matches(self.wiring.pattern, event):
                        self._enqueue("status-change", event)

    def _abort_children(self, parent: str) -> None:
        """Stop the executions the parent's startExecution.sync Tasks started and still wait for."""
        history = [
            e for page in self.sfn.get_paginator("get_execution_history").paginate(executionArn=parent) for e in page["events"]
        ]
        for event in history:
            details = event.get("taskSubmittedEventDetails") or {}
            if details.get("resourceType") != "states" or not str(details.get("resource", "")).startswith("startExecution.sync"):
                continue
            output = json.loads(details.get("output") or "{}")
            child = output.get("ExecutionArn") or output.get("executionArn")
            if child and self.sfn.describe_execution(executionArn=child)["status"] == "RUNNING":
                self.sfn.stop_execution(
                    executionArn=child, error="States.Aborted", cause=f"parent execution {parent} was aborted"
                )
