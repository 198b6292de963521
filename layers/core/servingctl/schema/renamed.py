"""Field renames of the stored documents: a document written under a field's old name still loads
(the models forbid unknown fields, so the old name is moved to the new one before validation)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def under_new_names(data: Any, renames: Mapping[str, str]) -> Any:
    """``data`` with each old field name (a key of ``renames``) moved to its new name, unless both are given."""
    if not isinstance(data, dict) or not any(old in data for old in renames):
        return data
    moved = dict(data)
    for old, new in renames.items():
        if old in moved and new not in moved:
            moved[new] = moved.pop(old)
    return moved
