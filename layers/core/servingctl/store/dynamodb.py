"""DynamoDB store: one table (pk, sk, TTL attribute `ttl`), conditional writes for phases and locks.

Item layout (every item also carries `kind`). Each profile and each benchmark run has a partition of
its own, so IAM's dynamodb:LeadingKeys can tell one from another (template.yaml scopes every role by
it); the sparse index LISTING_INDEX (lpk, lsk: only profile and run records carry them) lists them:
  profile state   pk="profile#<profile>"  sk="state"        ProfileState fields (times as ISO strings)
                  lpk="profile", lsk=<profile>
  lock            pk="lock"               sk="profile:<p>" | "pool:<pool>"
                  owner, acquired_at, expires_at (ISO), expires_epoch (N), ttl (N, expiry + 1 day)
  ledger session  pk="session#<profile>"  sk=<session id: "<started ISO>#<execution name>">
                  Session fields (times as ISO strings, uptime_s N)
  start           pk="start#<profile>"    sk=<start id: "<requested ISO>#<execution name>">
                  StartRecord fields (the start's timeline: marks with times as ISO strings)
The index is eventually consistent (no ConsistentRead on a GSI): a listing may miss a profile
recorded a moment ago; every decision re-reads the item itself. servingctl.store.migrate moves items
of the earlier layout (pk="profile" / pk="run", sk=<name>) to this one.
TTL only cleans up: lock conditions compare expires_epoch with the caller's clock, since DynamoDB may
delete expired items up to days late. Lock transactions are read by their CancellationReasons: a
ConditionalCheckFailed is a held (or lost) lock, TransactionConflict and ThrottlingError are retried.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import boto3
from boto3.dynamodb.conditions import Attr, ConditionBase, Key
from botocore.exceptions import ClientError

from servingctl.store.base import LockConflict, LockLost, StoreBusy, TransitionRefused
from servingctl.store.memory import checked_changes
from servingctl.store.models import ALLOWED_TRANSITIONS, InstanceSpan, Lock, Phase, ProfileState, Session, StartRecord, iso

LOCK_PK = "lock"
PROFILE_SK = "state"
# The sparse index listing profile and run records (partition lpk = "profile" | "run", sort lsk = name).
LISTING_INDEX = "listing"
LIST_PK = "lpk"
LIST_SK = "lsk"
LOCK_TTL_GRACE_S = 86400
# Optimistic phase writes retry this often when another writer changed the item in between.
PHASE_WRITE_ATTEMPTS = 3
# A lock transaction cancelled by a conflicting transaction or throttling (not by a held lock) is
# tried again this often, after TRANSACTION_BACKOFF_S x 2^attempt with jitter.
TRANSACTION_ATTEMPTS = 4
TRANSACTION_BACKOFF_S = 0.05
RETRIED_CANCELLATIONS = frozenset({"TransactionConflict", "ThrottlingError"})


def profile_key(profile: str) -> dict[str, str]:
    """The key of a profile's state record."""
    return {"pk": f"profile#{profile}", "sk": PROFILE_SK}


def query_all(table: Any, kwargs: dict[str, Any]) -> list[dict[str, Any]]:
    """Every item of a query, over all its pages."""
    items: list[dict[str, Any]] = []
    while True:
        page = table.query(**kwargs)
        items.extend(page["Items"])
        if "LastEvaluatedKey" not in page:
            return items
        kwargs = kwargs | {"ExclusiveStartKey": page["LastEvaluatedKey"]}


def _to_item(data: dict[str, Any]) -> dict[str, Any]:
    """JSON-mode values with floats as Decimal (what the DynamoDB resource accepts)."""
    item: dict[str, Any] = json.loads(json.dumps(data), parse_float=Decimal)
    return item


def _epoch(value: datetime) -> Decimal:
    return Decimal(str(round(value.timestamp(), 3)))


def _conditional_failure(exc: ClientError) -> bool:
    return exc.response["Error"]["Code"] == "ConditionalCheckFailedException"


def transact(client: Any, writes: list[dict[str, Any]]) -> list[str] | None:
    """Run the transaction; None when written, else the index-aligned cancellation reason codes
    of a condition failure. Conflicts with another transaction and throttling are retried."""
    last = ""
    for attempt in range(TRANSACTION_ATTEMPTS):
        try:
            client.transact_write_items(TransactItems=writes)
            return None
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "TransactionCanceledException":
                raise
            # DynamoDB says why per item, in the order of TransactItems ("None" for the fine ones).
            reasons = [str(r.get("Code")) for r in exc.response.get("CancellationReasons", [])]
            if "ConditionalCheckFailed" in reasons:
                return reasons
            if not reasons or set(reasons) - {"None"} - RETRIED_CANCELLATIONS:
                raise
            last = ", ".join(reasons)
        time.sleep(TRANSACTION_BACKOFF_S * 2**attempt * (0.5 + random.random()))
    raise StoreBusy(f"TransactWriteItems kept being cancelled ({last}) after {TRANSACTION_ATTEMPTS} attempts")


class DynamoStore:
    """The store on one DynamoDB table."""

    def __init__(self, table_name: str, resource: Any | None = None) -> None:
        self._table = (resource or boto3.resource("dynamodb")).Table(table_name)
        self._client = self._table.meta.client

    # ---- profile state -------------------------------------------------------------------------
    def get_profile(self, profile: str) -> ProfileState:
        """The profile's state (STOPPED with no history when never recorded)."""
        item = self._table.get_item(Key=profile_key(profile), ConsistentRead=True).get("Item")
        return ProfileState.model_validate(item) if item else ProfileState(profile=profile)

    def list_profiles(self) -> list[ProfileState]:
        """Every recorded profile state, sorted by name (from the listing index: eventually consistent)."""
        items = query_all(self._table, {"IndexName": LISTING_INDEX, "KeyConditionExpression": Key(LIST_PK).eq("profile")})
        return sorted((ProfileState.model_validate(i) for i in items), key=lambda s: s.profile)

    def _write_profile(self, current: ProfileState, changes: dict[str, Any], now: datetime, condition: Any) -> ProfileState:
        new = ProfileState.model_validate(current.model_dump() | checked_changes(changes) | {"updated_at": now})
        dumped = _to_item(new.model_dump(mode="json"))
        names = ["profile", "updated_at", *changes]
        sets = {n: dumped[n] for n in names if dumped[n] is not None}
        removes = [n for n in names if dumped[n] is None]
        expression = "SET " + ", ".join(f"#{n} = :{n}" for n in [*sets, "kind", LIST_PK, LIST_SK])
        if removes:
            expression += " REMOVE " + ", ".join(f"#{n}" for n in removes)
        kwargs: dict[str, Any] = {
            "Key": profile_key(current.profile),
            "UpdateExpression": expression,
            "ExpressionAttributeNames": {f"#{n}": n for n in [*sets, *removes, "kind", LIST_PK, LIST_SK]},
            "ExpressionAttributeValues": {f":{n}": v for n, v in sets.items()}
            | {":kind": "profile", f":{LIST_PK}": "profile", f":{LIST_SK}": current.profile},
            "ReturnValues": "ALL_NEW",
        }
        if condition is not None:
            kwargs["ConditionExpression"] = condition
        attributes = self._table.update_item(**kwargs)["Attributes"]
        return ProfileState.model_validate(attributes)

    def update_profile(self, profile: str, now: datetime, **changes: Any) -> ProfileState:
        """Set the given fields (None removes one) without touching the others; returns the new state."""
        return self._write_profile(self.get_profile(profile), changes, now, None)

    def update_profile_if(self, profile: str, now: datetime, expect: dict[str, Any], **changes: Any) -> ProfileState | None:
        """Like update_profile, but only while every field in expect has that value (one conditional
        write); None otherwise. Expecting phase STOPPED also matches a never-recorded profile."""
        condition: ConditionBase | None = None
        for name, value in checked_changes(expect).items():
            value = value.value if isinstance(value, Phase) else iso(value) if isinstance(value, datetime) else value
            term: ConditionBase = Attr(name).not_exists() if value is None else Attr(name).eq(value)
            if name == "phase" and value == Phase.STOPPED.value:
                term = term | Attr(name).not_exists()
            condition = term if condition is None else condition & term
        try:
            return self._write_profile(self.get_profile(profile), changes, now, condition)
        except ClientError as exc:
            if not _conditional_failure(exc):
                raise
            return None

    def set_phase(self, profile: str, phase: Phase, now: datetime, execution: str, **changes: Any) -> ProfileState:
        """Move to phase (plus field changes) if ALLOWED_TRANSITIONS permits it, else TransitionRefused."""
        for _ in range(PHASE_WRITE_ATTEMPTS):
            current = self.get_profile(profile)
            if phase not in ALLOWED_TRANSITIONS[current.phase]:
                raise TransitionRefused(profile, current.phase, phase)
            since = current.phase_since if current.phase == phase else now
            # Optimistic: the phase must still be the one just read (an absent phase means STOPPED).
            unchanged: ConditionBase = Attr("phase").eq(current.phase.value)
            if current.phase == Phase.STOPPED:
                unchanged = unchanged | Attr("phase").not_exists()
            fields = {"phase": phase, "execution": execution, "phase_since": since} | changes
            try:
                return self._write_profile(current, fields, now, unchanged)
            except ClientError as exc:
                if not _conditional_failure(exc):
                    raise
        current = self.get_profile(profile)
        raise TransitionRefused(profile, current.phase, phase)

    # ---- locks ---------------------------------------------------------------------------------
    def _lock_put(self, lock: Lock, condition: str, names: dict[str, str], values: dict[str, Any]) -> dict[str, Any]:
        # Plain expression strings: boto3's condition builder hoists names/values out of TransactItems.
        item = _to_item(lock.model_dump(mode="json")) | {
            "pk": LOCK_PK,
            "sk": lock.name,
            "kind": "lock",
            "expires_epoch": _epoch(lock.expires_at),
            "ttl": int(lock.expires_at.timestamp()) + LOCK_TTL_GRACE_S,
        }
        return {
            "Put": {
                "TableName": self._table.name,
                "Item": item,
                "ConditionExpression": condition,
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
            }
        }

    def _transact(self, writes: list[dict[str, Any]]) -> list[str] | None:
        return transact(self._client, writes)

    def acquire_locks(
        self, names: Sequence[str], owner: str, now: datetime, ttl_s: int, replacing: Collection[str] = ()
    ) -> list[Lock]:
        """Take every named lock at once or none (LockConflict); the same owner re-acquiring renews;
        a lock held by one of `replacing` (owners known dead) is taken over, conditionally on that
        same owner still holding it."""
        dead = sorted(set(replacing) - {owner})
        condition = "attribute_not_exists(pk) OR expires_epoch <= :now OR #owner = :owner"
        if dead:
            condition += " OR #owner IN (" + ", ".join(f":dead{i}" for i in range(len(dead))) + ")"
        values = {":now": _epoch(now), ":owner": owner} | {f":dead{i}": d for i, d in enumerate(dead)}
        locks = [Lock(name=n, owner=owner, acquired_at=now, expires_at=now + timedelta(seconds=ttl_s)) for n in names]
        writes = [self._lock_put(lock, condition, {"#owner": "owner"}, values) for lock in locks]
        for _ in range(TRANSACTION_ATTEMPTS):
            reasons = self._transact(writes)
            if reasons is None:
                return locks
            for name, reason in zip(names, reasons, strict=False):
                held = self.get_lock(name) if reason == "ConditionalCheckFailed" else None
                if held and held.owner != owner and held.owner not in dead and held.live(now):
                    raise LockConflict(held)
            # The holder let go between the write and the read: the locks may be free now.
        raise StoreBusy(f"locks {', '.join(names)} changed hands during every one of {TRANSACTION_ATTEMPTS} attempts")

    def renew_locks(self, names: Sequence[str], owner: str, now: datetime, ttl_s: int) -> list[Lock]:
        """Extend every named lock owner still holds to now + ttl_s, or none (LockLost)."""
        current = {name: self.get_lock(name) for name in names}
        for name, held in current.items():
            if held is None or held.owner != owner:
                raise LockLost(name, owner, held.owner if held else None)
        renewed = [
            held.model_copy(update={"expires_at": now + timedelta(seconds=ttl_s)})
            for held in current.values()
            if held is not None
        ]
        writes = [self._lock_put(lock, "#owner = :owner", {"#owner": "owner"}, {":owner": owner}) for lock in renewed]
        reasons = self._transact(writes)
        if reasons is not None:
            name = next(n for n, r in zip(names, reasons, strict=False) if r == "ConditionalCheckFailed")
            held = self.get_lock(name)
            raise LockLost(name, owner, held.owner if held else None)
        return renewed

    def release_locks(self, names: Sequence[str], owner: str) -> list[str]:
        """Delete the named locks that owner holds; returns the names released."""
        released = []
        for name in names:
            try:
                self._table.delete_item(Key={"pk": LOCK_PK, "sk": name}, ConditionExpression=Attr("owner").eq(owner))
                released.append(name)
            except ClientError as exc:
                if not _conditional_failure(exc):
                    raise
        return released

    def get_lock(self, name: str) -> Lock | None:
        """The lock record (expired or not), None when absent."""
        item = self._table.get_item(Key={"pk": LOCK_PK, "sk": name}, ConsistentRead=True).get("Item")
        return Lock.model_validate(item) if item else None

    # ---- ledger sessions -----------------------------------------------------------------------
    def open_session(self, session: Session) -> Session:
        """Record a new session; opening the same session_id again returns the stored one."""
        item = _to_item(session.model_dump(mode="json", exclude_none=True))
        try:
            self._table.put_item(
                Item=item | {"pk": f"session#{session.profile}", "sk": session.session_id, "kind": "session"},
                ConditionExpression=Attr("pk").not_exists(),
            )
        except ClientError as exc:
            if not _conditional_failure(exc):
                raise
        stored = self.get_session(session.profile, session.session_id)
        assert stored is not None  # written above or already there
        return stored

    def close_session(
        self, profile: str, session_id: str, now: datetime, execution: str, reason: str, instances: Sequence[InstanceSpan] = ()
    ) -> Session:
        """Stamp stopped_at, uptime and the instances' spans once; closing again returns the closed session unchanged."""
        session = self.get_session(profile, session_id)
        if session is None:
            raise KeyError(f"no session {session_id!r} for profile {profile!r}")
        if not session.open:
            return session
        closed = session.model_copy(
            update={
                "stopped_at": now,
                "uptime_s": max(0.0, (now - session.started_at).total_seconds()),
                "stop_execution": execution,
                "close_reason": reason,
                "instances": list(instances),
            }
        )
        fields = {"stopped_at", "uptime_s", "stop_execution", "close_reason", "instances"}
        values = _to_item(closed.model_dump(mode="json", include=fields))
        try:
            self._table.update_item(
                Key={"pk": f"session#{profile}", "sk": session_id},
                UpdateExpression="SET stopped_at = :s, uptime_s = :u, stop_execution = :e, close_reason = :r, instances = :i",
                ConditionExpression=Attr("stopped_at").not_exists(),
                ExpressionAttributeValues={
                    ":s": values["stopped_at"],
                    ":u": values["uptime_s"],
                    ":e": values["stop_execution"],
                    ":r": values["close_reason"],
                    ":i": values["instances"],
                },
            )
        except ClientError as exc:
            if not _conditional_failure(exc):
                raise
        stored = self.get_session(profile, session_id)
        assert stored is not None
        return stored

    def retype_session(self, profile: str, session_id: str, instance_type: str, price_key: str, note: str) -> Session:
        """Bill an open session at another instance type (a capacity fallback), with why; a closed one is left as is."""
        try:
            self._table.update_item(
                Key={"pk": f"session#{profile}", "sk": session_id},
                UpdateExpression="SET instance_type = :t, price_key = :p, capacity_note = :n",
                ConditionExpression=Attr("pk").exists() & Attr("stopped_at").not_exists(),
                ExpressionAttributeValues={":t": instance_type, ":p": price_key, ":n": note},
            )
        except ClientError as exc:
            if not _conditional_failure(exc):
                raise
        stored = self.get_session(profile, session_id)
        if stored is None:
            raise KeyError(f"no session {session_id!r} for profile {profile!r}")
        return stored

    def get_session(self, profile: str, session_id: str) -> Session | None:
        """One session, None when absent."""
        item = self._table.get_item(Key={"pk": f"session#{profile}", "sk": session_id}, ConsistentRead=True).get("Item")
        return Session.model_validate(item) if item else None

    def list_sessions(self, profile: str) -> list[Session]:
        """The profile's sessions, oldest first."""
        items: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"KeyConditionExpression": Key("pk").eq(f"session#{profile}"), "ConsistentRead": True}
        while True:
            page = self._table.query(**kwargs)
            items.extend(page["Items"])
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        return [Session.model_validate(i) for i in items]

    # ---- start timelines -----------------------------------------------------------------------
    def put_start(self, record: StartRecord) -> StartRecord:
        """Write the start record whole (only its own execution writes it)."""
        item = _to_item(record.model_dump(mode="json", exclude_none=True))
        self._table.put_item(Item=item | {"pk": f"start#{record.profile}", "sk": record.start_id, "kind": "start"})
        return record

    def get_start(self, profile: str, start_id: str) -> StartRecord | None:
        """One start record, None when absent."""
        item = self._table.get_item(Key={"pk": f"start#{profile}", "sk": start_id}, ConsistentRead=True).get("Item")
        return StartRecord.model_validate(item) if item else None

    def list_starts(self, profile: str, limit: int = 50) -> list[StartRecord]:
        """The profile's latest `limit` starts, oldest first."""
        page = self._table.query(
            KeyConditionExpression=Key("pk").eq(f"start#{profile}"), ScanIndexForward=False, Limit=limit, ConsistentRead=True
        )
        return [StartRecord.model_validate(i) for i in reversed(page["Items"])]


# Keys, the listing index and billing as template.yaml's StateTable declares them.
TABLE_SCHEMA: dict[str, Any] = {
    "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
    "AttributeDefinitions": [{"AttributeName": n, "AttributeType": "S"} for n in ("pk", "sk", LIST_PK, LIST_SK)],
    "GlobalSecondaryIndexes": [
        {
            "IndexName": LISTING_INDEX,
            "KeySchema": [{"AttributeName": LIST_PK, "KeyType": "HASH"}, {"AttributeName": LIST_SK, "KeyType": "RANGE"}],
            "Projection": {"ProjectionType": "ALL"},
        }
    ],
    "BillingMode": "PAY_PER_REQUEST",
}


def create_table(table_name: str, resource: Any | None = None) -> None:
    """Create the table as template.yaml declares it (for the local twin and tests)."""
    resource = resource or boto3.resource("dynamodb")
    table = resource.create_table(TableName=table_name, **TABLE_SCHEMA)
    table.wait_until_exists()
    resource.meta.client.update_time_to_live(
        TableName=table_name, TimeToLiveSpecification={"Enabled": True, "AttributeName": "ttl"}
    )
