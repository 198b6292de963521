"""The store interface shared by the DynamoDB and in-memory implementations."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any, Protocol

from servingctl.shared.errors import Busy
from servingctl.store.models import InstanceSpan, Lock, Phase, ProfileState, Session, StartRecord


class LockConflict(Exception):
    """A lock is held by another owner whose lease has not run out."""

    def __init__(self, lock: Lock) -> None:
        super().__init__(f"{lock.name} is held by {lock.owner} until {lock.model_dump(mode='json')['expires_at']}")
        self.lock = lock


class LockLost(Exception):
    """A lock its owner meant to renew is held by another owner now, or gone (taken over, released)."""

    def __init__(self, name: str, owner: str, holder: str | None) -> None:
        now_held = f"held by {holder}" if holder else "no longer held"
        super().__init__(f"{name}: {owner} lost its lock, {now_held}")
        self.name, self.owner, self.holder = name, owner, holder


class StoreBusy(Busy):
    """The table kept cancelling a transaction for conflicts or throttling (not for a held lock)."""


class TransitionRefused(Exception):
    """The recorded phase does not allow the requested move (a stale or out-of-order writer)."""

    def __init__(self, profile: str, current: Phase, target: Phase) -> None:
        super().__init__(f"profile {profile}: {current} -> {target} is not an allowed transition")
        self.profile, self.current, self.target = profile, current, target


class Store(Protocol):
    """Profile state, locks and ledger sessions; every write is atomic for the record it touches."""

    def get_profile(self, profile: str) -> ProfileState:
        """The profile's state (STOPPED with no history when never recorded)."""
        ...

    def list_profiles(self) -> list[ProfileState]:
        """Every recorded profile state, sorted by name."""
        ...

    def update_profile(self, profile: str, now: datetime, **changes: Any) -> ProfileState:
        """Set the given fields (None removes one) without touching the others; returns the new state."""
        ...

    def set_phase(self, profile: str, phase: Phase, now: datetime, execution: str, **changes: Any) -> ProfileState:
        """Move to phase (plus field changes) if ALLOWED_TRANSITIONS permits it, else TransitionRefused."""
        ...

    def update_profile_if(self, profile: str, now: datetime, expect: dict[str, Any], **changes: Any) -> ProfileState | None:
        """Like update_profile, but only while every field in expect has that value (one conditional
        write); None, and nothing written, when one differs."""
        ...

    def acquire_locks(
        self, names: Sequence[str], owner: str, now: datetime, ttl_s: int, replacing: Collection[str] = ()
    ) -> list[Lock]:
        """Take every named lock at once or none (LockConflict); the same owner re-acquiring renews.

        A lock held by one of `replacing` (owners known dead) is taken over, conditionally on that
        same owner still holding it.
        """
        ...

    def renew_locks(self, names: Sequence[str], owner: str, now: datetime, ttl_s: int) -> list[Lock]:
        """Extend every named lock owner still holds to now + ttl_s, or none (LockLost)."""
        ...

    def release_locks(self, names: Sequence[str], owner: str) -> list[str]:
        """Delete the named locks that owner holds; returns the names released."""
        ...

    def get_lock(self, name: str) -> Lock | None:
        """The lock record (expired or not), None when absent."""
        ...

    def open_session(self, session: Session) -> Session:
        """Record a new session; opening the same session_id again returns the stored one."""
        ...

    def close_session(
        self, profile: str, session_id: str, now: datetime, execution: str, reason: str, instances: Sequence[InstanceSpan] = ()
    ) -> Session:
        """Stamp stopped_at, uptime and the instances' spans once; closing again returns the closed session unchanged."""
        ...

    def retype_session(self, profile: str, session_id: str, instance_type: str, price_key: str, note: str) -> Session:
        """Bill an open session at another instance type (a capacity fallback), with why; a closed one is left as is."""
        ...

    def get_session(self, profile: str, session_id: str) -> Session | None:
        """One session, None when absent."""
        ...

    def list_sessions(self, profile: str) -> list[Session]:
        """The profile's sessions, oldest first."""
        ...

    def put_start(self, record: StartRecord) -> StartRecord:
        """Write the start record whole (only its own execution writes it)."""
        ...

    def get_start(self, profile: str, start_id: str) -> StartRecord | None:
        """One start record, None when absent."""
        ...

    def list_starts(self, profile: str, limit: int = 50) -> list[StartRecord]:
        """The profile's latest `limit` starts, oldest first."""
        ...
