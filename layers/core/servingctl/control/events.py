"""EventBridge events of the control plane (source "servingctl", default bus): profile lifecycle and sweep decisions.

Publishing is best effort: an event that cannot be sent is logged, never a reason to fail a start,
a stop or a sweep (their state is in the table and the executions' history either way).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

if TYPE_CHECKING:
    from types_boto3_events import EventBridgeClient
    from types_boto3_events.type_defs import PutEventsRequestEntryTypeDef

SOURCE = "servingctl"
STARTING, READY, START_FAILED = "Profile starting", "Profile ready", "Profile start failed"
STOPPED, STOP_FAILED = "Profile stopped", "Profile stop failed"
AUTO_STOPPED, KEPT = "Profile auto-stopped", "Profile kept running"
STOPPING_SOON = "Profile stopping soon"
RECONCILED = "Profile reconciled"

log = logging.getLogger(__name__)


def publish(events: EventBridgeClient, detail_type: str, detail: dict[str, Any]) -> bool:
    """Put one event on the default bus; False (and a warning) when EventBridge refused it."""
    entry: PutEventsRequestEntryTypeDef = {"Source": SOURCE, "DetailType": detail_type, "Detail": json.dumps(detail, default=str)}
    try:
        answer = events.put_events(Entries=[entry])
    except (ClientError, BotoCoreError) as exc:
        log.warning("event not published: %s: %s", detail_type, exc)
        return False
    if answer.get("FailedEntryCount"):
        log.warning("event not published: %s: %s", detail_type, answer.get("Entries"))
        return False
    return True
