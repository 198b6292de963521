"""The in-memory and DynamoDB stores pass the same suite: phases, locks, ledger sessions."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError
from moto import mock_aws

from servingctl.store import DynamoStore, LockConflict, LockLost, MemoryStore, Phase, Session, Store, StoreBusy, TransitionRefused
from servingctl.store.dynamodb import TRANSACTION_ATTEMPTS, create_table
from servingctl.store.models import InstanceSpan, Mark, StartRecord, session_id_for

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
EXEC_A = "arn:aws:states:us-east-1:123456789012:execution:start_profile:start-deepseek-a"
EXEC_B = "arn:aws:states:us-east-1:123456789012:execution:start_profile:start-deepseek-b"
EXEC_C = "arn:aws:states:us-east-1:123456789012:execution:stop_profile:stop-deepseek-c"


@pytest.fixture(params=["memory", "dynamodb"])
def store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
        return
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        resource = boto3.resource("dynamodb", region_name="us-east-1")
        create_table("servingctl-test", resource)
        yield DynamoStore("servingctl-test", resource)


def test_unknown_profile_reads_as_stopped(store: Store) -> None:
    state = store.get_profile("deepseek-v4-flash")
    assert state.phase == Phase.STOPPED and state.execution is None
    assert store.list_profiles() == []


def test_phase_walk_records_execution_times_and_durations(store: Store) -> None:
    store.set_phase("p", Phase.STARTING, T0, EXEC_A, session_id="s1")
    t1 = T0 + timedelta(minutes=14)
    ready = store.set_phase(
        "p",
        Phase.READY,
        t1,
        EXEC_A,
        ready_at=t1,
        lease_deadline=t1 + timedelta(hours=2),
        phase_seconds={"capacity": 180.5, "health": 600.0},
    )
    assert ready.phase == Phase.READY and ready.phase_since == t1 and ready.execution == EXEC_A
    again = store.get_profile("p")
    assert again.phase_seconds == {"capacity": 180.5, "health": 600.0}
    assert again.lease_deadline == t1 + timedelta(hours=2)
    assert again.session_id == "s1"
    assert [s.profile for s in store.list_profiles()] == ["p"]


def test_same_phase_keeps_its_start_time(store: Store) -> None:
    store.set_phase("p", Phase.STARTING, T0, EXEC_A)
    retried = store.set_phase("p", Phase.STARTING, T0 + timedelta(seconds=5), EXEC_A)
    assert retried.phase_since == T0


@pytest.mark.parametrize(
    ("path", "refused"),
    [
        ([], Phase.READY),  # STOPPED -> READY skips the start
        ([Phase.STARTING, Phase.READY, Phase.STOPPING], Phase.READY),  # a stop ends STOPPED or FAILED
        ([Phase.STARTING], Phase.STOPPED),  # a start ends READY or FAILED, never STOPPED
    ],
)
def test_disallowed_transition_is_refused_and_changes_nothing(store: Store, path: list[Phase], refused: Phase) -> None:
    for phase in path:
        store.set_phase("p", phase, T0, EXEC_A)
    before = store.get_profile("p")
    with pytest.raises(TransitionRefused, match=f"-> {refused}"):
        store.set_phase("p", refused, T0 + timedelta(seconds=1), EXEC_B)
    assert store.get_profile("p") == before


def test_update_profile_leaves_other_fields_and_none_removes(store: Store) -> None:
    store.set_phase("p", Phase.STARTING, T0, EXEC_A, last_error="old")
    store.update_profile("p", T0, stop_requested_by=EXEC_B, stop_requested_until=T0 + timedelta(minutes=5))
    state = store.get_profile("p")
    assert state.phase == Phase.STARTING and state.last_error == "old"
    assert state.stop_requested(T0) and not state.stop_requested(T0 + timedelta(minutes=5))
    store.update_profile("p", T0, stop_requested_by=None, stop_requested_until=None, last_error=None)
    cleared = store.get_profile("p")
    assert cleared.stop_requested_by is None and cleared.last_error is None and cleared.phase == Phase.STARTING


def test_conditional_update_writes_only_while_the_expected_fields_hold(store: Store) -> None:
    lease = T0 + timedelta(minutes=30)
    assert store.update_profile_if("p", T0, {"phase": Phase.READY}, lease_deadline=lease) is None  # never started
    store.set_phase("p", Phase.STARTING, T0, EXEC_A)
    store.set_phase("p", Phase.READY, T0, EXEC_A, lease_deadline=lease)
    later = lease + timedelta(minutes=30)
    kept = store.update_profile_if(
        "p", T0, {"phase": Phase.READY, "lease_deadline": lease}, lease_deadline=later, held_by="run-1"
    )
    assert kept is not None and kept.lease_deadline == later and kept.held_by == "run-1"
    # A writer that read the old lease loses: nothing is written.
    assert store.update_profile_if("p", T0, {"phase": Phase.READY, "lease_deadline": lease}, lease_deadline=lease) is None
    assert store.update_profile_if("p", T0, {"held_by": "run-2"}, held_by=None) is None
    assert store.update_profile_if("p", T0, {"held_by": "run-1"}, held_by=None).held_by is None
    store.set_phase("p", Phase.STOPPING, T0, EXEC_B)
    assert store.update_profile_if("p", T0, {"phase": Phase.READY}, lease_deadline=later + timedelta(hours=1)) is None
    assert store.get_profile("p").lease_deadline == later and store.get_profile("p").phase == Phase.STOPPING


def test_update_profile_refuses_unknown_fields(store: Store) -> None:
    with pytest.raises(ValueError, match="unknown profile field"):
        store.update_profile("p", T0, phaze="READY")


def test_lock_is_exclusive_until_it_expires(store: Store) -> None:
    names = ["profile:p", "pool:g"]
    taken = store.acquire_locks(names, EXEC_A, T0, ttl_s=600)
    assert [lock.name for lock in taken] == names
    with pytest.raises(LockConflict, match=f"held by {EXEC_A}") as err:
        store.acquire_locks(["profile:p"], EXEC_B, T0 + timedelta(seconds=599), ttl_s=600)
    assert err.value.lock.owner == EXEC_A
    # A dead execution cannot hold it forever: after expiry another execution takes it over.
    later = T0 + timedelta(seconds=600)
    store.acquire_locks(["profile:p"], EXEC_B, later, ttl_s=600)
    assert store.get_lock("profile:p").owner == EXEC_B


def test_same_owner_reacquiring_is_idempotent_and_renews(store: Store) -> None:
    store.acquire_locks(["profile:p"], EXEC_A, T0, ttl_s=60)
    renewed = store.acquire_locks(["profile:p"], EXEC_A, T0 + timedelta(seconds=30), ttl_s=60)
    assert renewed[0].expires_at == T0 + timedelta(seconds=90)
    assert store.get_lock("profile:p").expires_at == T0 + timedelta(seconds=90)


def test_lock_set_is_all_or_nothing(store: Store) -> None:
    store.acquire_locks(["pool:g"], EXEC_A, T0, ttl_s=600)
    with pytest.raises(LockConflict, match="pool:g"):
        store.acquire_locks(["profile:q", "pool:g"], EXEC_B, T0, ttl_s=600)
    assert store.get_lock("profile:q") is None


def test_a_dead_owners_live_lock_is_taken_over_only_from_that_owner(store: Store) -> None:
    store.acquire_locks(["profile:p", "pool:g"], EXEC_A, T0, ttl_s=600)
    early = T0 + timedelta(seconds=1)
    taken = store.acquire_locks(["profile:p", "pool:g"], EXEC_B, early, ttl_s=60, replacing={EXEC_A})
    assert [(lock.owner, lock.expires_at) for lock in taken] == [(EXEC_B, early + timedelta(seconds=60))] * 2
    assert store.get_lock("pool:g").owner == EXEC_B
    # Once B holds it, a third execution that also saw A dead does not take it from B.
    with pytest.raises(LockConflict, match=f"held by {EXEC_B}"):
        store.acquire_locks(["profile:p"], EXEC_C, early, ttl_s=60, replacing={EXEC_A})
    assert store.get_lock("profile:p").owner == EXEC_B


def test_renewing_extends_only_the_owners_locks(store: Store) -> None:
    store.acquire_locks(["profile:p", "pool:g"], EXEC_A, T0, ttl_s=60)
    renewed = store.renew_locks(["profile:p", "pool:g"], EXEC_A, T0 + timedelta(seconds=50), ttl_s=60)
    assert [lock.expires_at for lock in renewed] == [T0 + timedelta(seconds=110)] * 2
    assert store.get_lock("pool:g").expires_at == T0 + timedelta(seconds=110)
    store.acquire_locks(["pool:g"], EXEC_B, T0 + timedelta(seconds=200), ttl_s=60)
    with pytest.raises(LockLost, match=f"pool:g: {EXEC_A} lost its lock, held by {EXEC_B}"):
        store.renew_locks(["profile:p", "pool:g"], EXEC_A, T0 + timedelta(seconds=201), ttl_s=60)
    # None or all: the profile lock was not extended either.
    assert store.get_lock("profile:p").expires_at == T0 + timedelta(seconds=110)
    store.release_locks(["profile:p"], EXEC_A)
    with pytest.raises(LockLost, match="no longer held"):
        store.renew_locks(["profile:p"], EXEC_A, T0 + timedelta(seconds=202), ttl_s=60)


def test_release_only_frees_the_owners_locks(store: Store) -> None:
    store.acquire_locks(["profile:p", "pool:g"], EXEC_A, T0, ttl_s=600)
    assert store.release_locks(["profile:p", "pool:g"], EXEC_B) == []
    assert store.get_lock("pool:g").owner == EXEC_A
    assert store.release_locks(["profile:p", "pool:g"], EXEC_A) == ["profile:p", "pool:g"]
    assert store.get_lock("profile:p") is None
    assert store.release_locks(["profile:p"], EXEC_A) == []
    store.acquire_locks(["profile:p"], EXEC_B, T0, ttl_s=600)


def _session(started: datetime, execution: str = EXEC_A) -> Session:
    return Session(
        profile="p",
        session_id=session_id_for(started, execution),
        pool="g7e-2gpu",
        instance_type="g7e.12xlarge",
        price_key="g7e.12xlarge",
        started_at=started,
        start_execution=execution,
    )


def test_session_open_close_records_uptime_once(store: Store) -> None:
    opened = store.open_session(_session(T0))
    assert opened.open and store.open_session(_session(T0)) == opened
    closed = store.close_session("p", opened.session_id, T0 + timedelta(hours=1, minutes=30), EXEC_B, "stopped")
    assert closed.uptime_s == 5400.0 and closed.stop_execution == EXEC_B and not closed.open
    again = store.close_session("p", opened.session_id, T0 + timedelta(hours=5), EXEC_A, "failed")
    assert again == closed


def test_a_closed_session_keeps_each_instances_span(store: Store) -> None:
    opened = store.open_session(_session(T0))
    assert opened.instances == []  # a session from before replicas, or not closed yet, reads with none
    spans = [
        InstanceSpan(instance_id="i-1", started_at=T0, stopped_at=T0 + timedelta(hours=2)),
        InstanceSpan(instance_id="i-2", started_at=T0 + timedelta(minutes=30), stopped_at=T0 + timedelta(hours=1)),
    ]
    closed = store.close_session("p", opened.session_id, T0 + timedelta(hours=2), EXEC_B, "stopped", spans)
    assert closed.instances == spans and store.get_session("p", opened.session_id) == closed
    # Closing again (without spans) leaves them.
    assert store.close_session("p", opened.session_id, T0 + timedelta(hours=3), EXEC_A, "failed") == closed


def test_sessions_list_oldest_first(store: Store) -> None:
    later = store.open_session(_session(T0 + timedelta(days=1), EXEC_B))
    first = store.open_session(_session(T0))
    assert [s.session_id for s in store.list_sessions("p")] == [first.session_id, later.session_id]
    assert store.list_sessions("other") == []
    assert store.get_session("p", "nope") is None


def _start(requested: datetime, execution: str = EXEC_A) -> StartRecord:
    return StartRecord(
        profile="p",
        start_id=session_id_for(requested, execution),
        execution=execution,
        requested_at=requested,
        marks=[Mark(name="requested", at=requested, source="controller", seen_at=requested)],
    )


def test_start_records_keep_their_timeline_and_list_the_latest_oldest_first(store: Store) -> None:
    starts = [_start(T0 + timedelta(hours=h), EXEC_A if h % 2 else EXEC_B) for h in range(4)]
    for record in reversed(starts):
        store.put_start(record)
    done = starts[1].model_copy(deep=True)
    done.marks.append(Mark(name="ready", at=T0 + timedelta(hours=1, minutes=15), source="controller"))
    done.outcome, done.ended_at = "READY", T0 + timedelta(hours=1, minutes=15)
    store.put_start(done)  # a start's execution rewrites its own record
    assert store.get_start("p", done.start_id) == done
    assert [r.start_id for r in store.list_starts("p")] == [r.start_id for r in starts]
    # The limit keeps the latest starts; at the limit and one past it.
    assert [r.start_id for r in store.list_starts("p", limit=2)] == [r.start_id for r in starts[2:]]
    assert len(store.list_starts("p", limit=4)) == len(store.list_starts("p", limit=5)) == 4
    assert store.list_starts("other") == [] and store.get_start("p", "nope") is None


def test_closing_an_unknown_session_fails(store: Store) -> None:
    with pytest.raises(KeyError, match="no session"):
        store.close_session("p", "missing", T0, EXEC_A, "stopped")


# ---- DynamoDB's reasons for cancelling a transaction ---------------------------------------------
# moto cancels a transaction only for a failed condition (with CancellationReasons, as DynamoDB
# does); it never reports a conflicting transaction or throttling. This double answers
# TransactWriteItems the way DynamoDB does then: HTTP 400, TransactionCanceledException, one
# reason per item in the order of TransactItems ("None" for the items that were fine).
class CancelledTransactions:
    """Answer the next TransactWriteItems calls with these reason lists, then let moto run."""

    def __init__(self, store: DynamoStore, *answers: list[str]) -> None:
        self.answers, self.calls = list(answers), 0
        store._client.meta.events.register("before-call.dynamodb.TransactWriteItems", self)

    def __call__(self, **_: object) -> tuple[AWSResponse, dict] | None:
        self.calls += 1
        if not self.answers:
            return None
        codes = self.answers.pop(0)
        message = f"Transaction cancelled, please refer cancellation reasons for specific reasons [{', '.join(codes)}]"
        reasons = [{"Code": "None"} if c == "None" else {"Code": c, "Message": c} for c in codes]
        parsed = {
            "Error": {"Code": "TransactionCanceledException", "Message": message},
            "Message": message,
            "CancellationReasons": reasons,
        }
        return AWSResponse("https://dynamodb.us-east-1.amazonaws.com", 400, {}, None), parsed


@pytest.fixture
def dynamo(monkeypatch: pytest.MonkeyPatch) -> Iterator[DynamoStore]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        resource = boto3.resource("dynamodb", region_name="us-east-1")
        create_table("servingctl-test", resource)
        yield DynamoStore("servingctl-test", resource)


@pytest.mark.parametrize("reason", ["TransactionConflict", "ThrottlingError"])
def test_a_conflicting_or_throttled_transaction_is_retried_not_reported_held(dynamo: DynamoStore, reason: str) -> None:
    double = CancelledTransactions(dynamo, [reason, "None"], ["None", reason])
    taken = dynamo.acquire_locks(["profile:p", "pool:g"], EXEC_A, T0, ttl_s=60)
    assert double.calls == 3 and [lock.owner for lock in taken] == [EXEC_A, EXEC_A]
    assert dynamo.get_lock("pool:g").owner == EXEC_A
    CancelledTransactions(dynamo, ["None", reason])
    assert dynamo.renew_locks(["profile:p", "pool:g"], EXEC_A, T0 + timedelta(seconds=30), ttl_s=60)[1].expires_at == (
        T0 + timedelta(seconds=90)
    )


def test_a_transaction_cancelled_at_every_attempt_says_the_store_is_busy(dynamo: DynamoStore) -> None:
    CancelledTransactions(dynamo, *[["TransactionConflict", "None"]] * TRANSACTION_ATTEMPTS)
    with pytest.raises(
        StoreBusy, match=rf"kept being cancelled \(TransactionConflict, None\) after {TRANSACTION_ATTEMPTS} attempts"
    ):
        dynamo.acquire_locks(["profile:p", "pool:g"], EXEC_A, T0, ttl_s=60)
    assert dynamo.get_lock("profile:p") is None


def test_a_failed_condition_reported_by_its_reason_names_the_holder(dynamo: DynamoStore) -> None:
    dynamo.acquire_locks(["pool:g"], EXEC_B, T0, ttl_s=600)
    # The real condition failure, as moto reports it: reasons [None, ConditionalCheckFailed].
    with pytest.raises(LockConflict, match=f"pool:g is held by {EXEC_B}"):
        dynamo.acquire_locks(["profile:p", "pool:g"], EXEC_A, T0, ttl_s=60)


def test_a_lock_freed_between_the_cancellation_and_the_read_is_taken(dynamo: DynamoStore) -> None:
    # The condition failed on a holder that released before we looked: try again, do not report it held.
    double = CancelledTransactions(dynamo, ["ConditionalCheckFailed", "None"])
    assert [lock.owner for lock in dynamo.acquire_locks(["profile:p", "pool:g"], EXEC_A, T0, ttl_s=60)] == [EXEC_A] * 2
    assert double.calls == 2


def test_another_cancellation_reason_is_not_swallowed(dynamo: DynamoStore) -> None:
    CancelledTransactions(dynamo, ["ValidationError", "None"])
    with pytest.raises(ClientError, match="TransactionCanceledException"):
        dynamo.acquire_locks(["profile:p", "pool:g"], EXEC_A, T0, ttl_s=60)
