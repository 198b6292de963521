"""In-memory store with the DynamoDB store's semantics (tests, the CLI's dry runs, local tools)."""

from __future__ import annotations

import threading
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import Any

from servingctl.store.base import LockConflict, LockLost, TransitionRefused
from servingctl.store.models import (
    ALLOWED_TRANSITIONS,
    MUTABLE_FIELDS,
    InstanceSpan,
    Lock,
    Phase,
    ProfileState,
    Session,
    StartRecord,
)


def checked_changes(changes: dict[str, Any]) -> dict[str, Any]:
    """Refuse fields the caller may not set, so a typo cannot silently create an attribute."""
    unknown = set(changes) - MUTABLE_FIELDS
    if unknown:
        raise ValueError(f"unknown profile field(s) {sorted(unknown)}; allowed: {sorted(MUTABLE_FIELDS)}")
    return changes


class MemoryStore:
    """Dicts behind one mutex: every method is atomic like its conditional-write twin."""

    def __init__(self) -> None:
        self._mutex = threading.RLock()
        self._profiles: dict[str, ProfileState] = {}
        self._locks: dict[str, Lock] = {}
        self._sessions: dict[tuple[str, str], Session] = {}
        self._starts: dict[tuple[str, str], StartRecord] = {}

    def get_profile(self, profile: str) -> ProfileState:
        """The profile's state (STOPPED with no history when never recorded)."""
        with self._mutex:
            found = self._profiles.get(profile)
            return found.model_copy(deep=True) if found else ProfileState(profile=profile)

    def list_profiles(self) -> list[ProfileState]:
        """Every recorded profile state, sorted by name."""
        with self._mutex:
            return [self._profiles[name].model_copy(deep=True) for name in sorted(self._profiles)]

    def update_profile(self, profile: str, now: datetime, **changes: Any) -> ProfileState:
        """Set the given fields (None removes one) without touching the others; returns the new state."""
        with self._mutex:
            current = self.get_profile(profile)
            merged = current.model_dump() | checked_changes(changes) | {"updated_at": now}
            self._profiles[profile] = ProfileState.model_validate(merged)
            return self.get_profile(profile)

    def update_profile_if(self, profile: str, now: datetime, expect: dict[str, Any], **changes: Any) -> ProfileState | None:
        """Like update_profile, but only while every field in expect has that value; None otherwise."""
        with self._mutex:
            current = self.get_profile(profile)
            if any(getattr(current, field) != value for field, value in checked_changes(expect).items()):
                return None
            return self.update_profile(profile, now, **changes)

    def set_phase(self, profile: str, phase: Phase, now: datetime, execution: str, **changes: Any) -> ProfileState:
        """Move to phase (plus field changes) if ALLOWED_TRANSITIONS permits it, else TransitionRefused."""
        with self._mutex:
            current = self.get_profile(profile)
            if phase not in ALLOWED_TRANSITIONS[current.phase]:
                raise TransitionRefused(profile, current.phase, phase)
            since = current.phase_since if current.phase == phase else now
            return self.update_profile(profile, now, phase=phase, execution=execution, phase_since=since, **changes)

    def acquire_locks(
        self, names: Sequence[str], owner: str, now: datetime, ttl_s: int, replacing: Collection[str] = ()
    ) -> list[Lock]:
        """Take every named lock at once or none (LockConflict); the same owner re-acquiring renews;
        a lock held by one of `replacing` (owners known dead) is taken over."""
        with self._mutex:
            for name in names:
                held = self._locks.get(name)
                if held and held.owner != owner and held.owner not in replacing and held.live(now):
                    raise LockConflict(held)
            taken = [Lock(name=n, owner=owner, acquired_at=now, expires_at=now + timedelta(seconds=ttl_s)) for n in names]
            self._locks.update({lock.name: lock for lock in taken})
            return [lock.model_copy() for lock in taken]

    def renew_locks(self, names: Sequence[str], owner: str, now: datetime, ttl_s: int) -> list[Lock]:
        """Extend every named lock owner still holds to now + ttl_s, or none (LockLost)."""
        with self._mutex:
            for name in names:
                held = self._locks.get(name)
                if held is None or held.owner != owner:
                    raise LockLost(name, owner, held.owner if held else None)
            renewed = [self._locks[n].model_copy(update={"expires_at": now + timedelta(seconds=ttl_s)}) for n in names]
            self._locks.update({lock.name: lock for lock in renewed})
            return [lock.model_copy() for lock in renewed]

    def release_locks(self, names: Sequence[str], owner: str) -> list[str]:
        """Delete the named locks that owner holds; returns the names released."""
        with self._mutex:
            released = [n for n in names if n in self._locks and self._locks[n].owner == owner]
            for name in released:
                del self._locks[name]
            return released

    def get_lock(self, name: str) -> Lock | None:
        """The lock record (expired or not), None when absent."""
        with self._mutex:
            found = self._locks.get(name)
            return found.model_copy() if found else None

    def open_session(self, session: Session) -> Session:
        """Record a new session; opening the same session_id again returns the stored one."""
        with self._mutex:
            key = (session.profile, session.session_id)
            self._sessions.setdefault(key, session.model_copy())
            return self._sessions[key].model_copy()

    def close_session(
        self, profile: str, session_id: str, now: datetime, execution: str, reason: str, instances: Sequence[InstanceSpan] = ()
    ) -> Session:
        """Stamp stopped_at, uptime and the instances' spans once; closing again returns the closed session unchanged."""
        with self._mutex:
            session = self._sessions.get((profile, session_id))
            if session is None:
                raise KeyError(f"no session {session_id!r} for profile {profile!r}")
            if session.open:
                session = session.model_copy(
                    update={
                        "stopped_at": now,
                        "uptime_s": max(0.0, (now - session.started_at).total_seconds()),
                        "stop_execution": execution,
                        "close_reason": reason,
                        "instances": list(instances),
                    }
                )
                self._sessions[(profile, session_id)] = session
            return session.model_copy()

    def retype_session(self, profile: str, session_id: str, instance_type: str, price_key: str, note: str) -> Session:
        """Bill an open session at another instance type (a capacity fallback), with why; a closed one is left as is."""
        with self._mutex:
            session = self._sessions.get((profile, session_id))
            if session is None:
                raise KeyError(f"no session {session_id!r} for profile {profile!r}")
            if session.open:
                session = session.model_copy(
                    update={"instance_type": instance_type, "price_key": price_key, "capacity_note": note}
                )
                self._sessions[(profile, session_id)] = session
            return session.model_copy()

    def get_session(self, profile: str, session_id: str) -> Session | None:
        """One session, None when absent."""
        with self._mutex:
            found = self._sessions.get((profile, session_id))
            return found.model_copy() if found else None

    def list_sessions(self, profile: str) -> list[Session]:
        """The profile's sessions, oldest first."""
        with self._mutex:
            return sorted((s.model_copy() for (p, _), s in self._sessions.items() if p == profile), key=lambda s: s.session_id)

    def put_start(self, record: StartRecord) -> StartRecord:
        """Write the start record whole (only its own execution writes it)."""
        with self._mutex:
            self._starts[(record.profile, record.start_id)] = record.model_copy(deep=True)
            return record

    def get_start(self, profile: str, start_id: str) -> StartRecord | None:
        """One start record, None when absent."""
        with self._mutex:
            found = self._starts.get((profile, start_id))
            return found.model_copy(deep=True) if found else None

    def list_starts(self, profile: str, limit: int = 50) -> list[StartRecord]:
        """The profile's latest `limit` starts, oldest first."""
        with self._mutex:
            mine = sorted((s for (p, _), s in self._starts.items() if p == profile), key=lambda s: s.start_id)
            return [s.model_copy(deep=True) for s in mine[-limit:]] if limit > 0 else []
