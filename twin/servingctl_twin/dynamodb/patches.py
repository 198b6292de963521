"""DynamoDB's moto patch: an item is written atomically (moto, serving requests in threads, lets a read
see an item half-written by UpdateItem)."""

from __future__ import annotations

import threading
from typing import Any

from moto.dynamodb.responses import DynamoHandler

from servingctl_twin.patching import Patch, original

# moto's UpdateItem creates the item from its key, then applies the expression: a GetItem between the
# two sees an item of keys alone. DynamoDB writes an item atomically; one request at a time does too.
# One lock for the process, as moto's tables are the process's.
_dynamodb_lock = threading.Lock()


def _dynamodb_call_action(self: DynamoHandler) -> Any:
    """One DynamoDB request at a time."""
    with _dynamodb_lock:
        return original("DynamoHandler.call_action")(self)


PATCHES = [
    # Atomic item writes (a read never sees an UpdateItem half done).
    Patch("DynamoHandler.call_action", DynamoHandler, "call_action", ("self",), _dynamodb_call_action),
]
