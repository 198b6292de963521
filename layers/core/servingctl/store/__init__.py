"""State, locks, ledger and benchmark storage behind small interfaces (DynamoDB/S3 and in-memory)."""

from servingctl.store.base import LockConflict, Store, TransitionRefused
from servingctl.store.dynamodb import DynamoStore
from servingctl.store.memory import MemoryStore
from servingctl.store.models import ALLOWED_TRANSITIONS, Lock, Phase, ProfileState, Session

__all__ = [
    "ALLOWED_TRANSITIONS",
    "DynamoStore",
    "Lock",
    "LockConflict",
    "MemoryStore",
    "Phase",
    "ProfileState",
    "Session",
    "Store",
    "TransitionRefused",
]
