"""State, locks, ledger and benchmark storage behind small interfaces (DynamoDB/S3 and in-memory)."""

from servingctl.store.base import LockConflict, LockLost, Store, StoreBusy, TransitionRefused
from servingctl.store.dynamodb import DynamoStore
from servingctl.store.memory import MemoryStore
from servingctl.store.models import ALLOWED_TRANSITIONS, Lock, Phase, ProfileState, Session, StartRecord

__all__ = [
    "ALLOWED_TRANSITIONS",
    "DynamoStore",
    "Lock",
    "LockConflict",
    "LockLost",
    "MemoryStore",
    "Phase",
    "ProfileState",
    "Session",
    "StartRecord",
    "Store",
    "StoreBusy",
    "TransitionRefused",
]
