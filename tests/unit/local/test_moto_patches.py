"""The moto patches are pinned: a different moto, or a changed signature of anything patched, fails loudly."""

from __future__ import annotations

import subprocess
import sys

import moto
import pytest

from servingctl.local import moto_patches


def test_installed_moto_is_the_pinned_one_and_every_patched_attribute_matches() -> None:
    assert moto.__version__ == moto_patches.MOTO_VERSION == "5.2.5"
    moto_patches.check_moto()  # raises MotoVersionError naming the attribute otherwise


def test_another_moto_version_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(moto, "__version__", "5.2.6")
    with pytest.raises(moto_patches.MotoVersionError, match=r"pinned to moto 5.2.5, found 5.2.6"):
        moto_patches.check_moto()


def test_a_changed_signature_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    owner, attr, params = moto_patches.USED["Task.__init__"]
    monkeypatch.setitem(moto_patches.USED, "Task.__init__", (owner, attr, (*params, "new_parameter")))
    with pytest.raises(moto_patches.MotoVersionError, match=r"Task.__init__ has parameters"):
        moto_patches.check_moto()


def test_a_vanished_attribute_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    owner, _, params = moto_patches.USED["Preprocessor.visit"]
    monkeypatch.setitem(moto_patches.USED, "Preprocessor.visit", (owner, "visit_removed_in_moto_6", params))
    with pytest.raises(moto_patches.MotoVersionError, match="is gone"):
        moto_patches.check_moto()


# Run in a child process: apply() patches moto for the whole process, which would break the
# plain-moto unit tests that share this pytest worker.
APPLY_CHECK = """
import inspect
from servingctl.local import moto_patches
moto_patches.apply()
moto_patches.apply()  # idempotent: the originals stay the originals
for label, (owner, attr, params) in moto_patches.PATCHED.items():
    original = moto_patches._ORIGINALS[label]
    current = inspect.getattr_static(owner, attr)
    current = current.__func__ if isinstance(current, staticmethod) else current
    assert current is not original, label
    assert tuple(inspect.signature(original).parameters) == params, label
    assert "servingctl" in current.__module__, label
print(len(moto_patches.PATCHED))
"""


def test_apply_replaces_every_patched_attribute_once() -> None:
    result = subprocess.run([sys.executable, "-c", APPLY_CHECK], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.split()[-1]) == len(moto_patches.PATCHED)
