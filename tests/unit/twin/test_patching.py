"""The moto patches are pinned: a different moto, or a changed signature of anything patched, fails
loudly; each patch lives in the folder of the service it plays; a region is played by one twin."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import moto
import pytest

from servingctl_twin import patching


def _with(label: str, **changes: object) -> list[patching.Patch]:
    """Every patch, the one labelled label changed."""
    found = patching.patches()
    assert label in {p.label for p in found}
    return [dataclasses.replace(p, **changes) if p.label == label else p for p in found]  # type: ignore[arg-type]


def test_installed_moto_is_the_pinned_one_and_every_patched_attribute_matches() -> None:
    assert moto.__version__ == patching.MOTO_VERSION == "5.2.5"
    patching.check_moto()  # raises MotoVersionError naming the attribute otherwise


def test_another_moto_version_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(moto, "__version__", "5.2.6")
    with pytest.raises(patching.MotoVersionError, match=r"pinned to moto 5\.2\.5, found 5\.2\.6"):
        patching.check_moto()


def test_a_changed_signature_is_refused() -> None:
    [task] = [p for p in patching.patches() if p.label == "Task.__init__"]
    with pytest.raises(patching.MotoVersionError, match=r"Task\.__init__ has parameters"):
        patching.check_moto(_with("Task.__init__", params=(*task.params, "new_parameter")))


def test_a_vanished_attribute_is_refused() -> None:
    with pytest.raises(patching.MotoVersionError, match=r"Preprocessor\.visit is gone"):
        patching.check_moto(_with("Preprocessor.visit", attr="visit_removed_in_moto_6"))


def test_each_patch_is_declared_once_in_the_folder_of_its_service() -> None:
    found = patching.patches()
    labels = [p.label for p in found]
    assert len(labels) == len(set(labels))
    for service in patching.SERVICES:
        declared = __import__(f"servingctl_twin.{service}.patches", fromlist=["PATCHES"]).PATCHES
        for patch in declared:
            replacement = patch.replacement.__func__ if isinstance(patch.replacement, staticmethod) else patch.replacement
            if replacement is not None:
                assert replacement.__module__.startswith(f"servingctl_twin.{service}."), (patch.label, replacement.__module__)


def test_a_region_is_played_by_one_twin_at_a_time() -> None:
    site = patching.claim("eu-west-3")
    try:
        with pytest.raises(RuntimeError, match="already plays region eu-west-3"):
            patching.claim("eu-west-3")
        assert patching.site_of("eu-west-3") is site and patching.site_of("eu-west-2") is None
    finally:
        patching.release(site)
    patching.release(patching.claim("eu-west-3"))  # free again once released


# Run in a child process: apply() patches moto for the whole process, which would break the
# plain-moto unit tests that share this pytest worker.
APPLY_CHECK = """
import inspect
from servingctl_twin import patching
patching.apply()
patching.apply()  # idempotent: the originals stay the originals
replaced = [p for p in patching.patches() if p.replacement is not None]
for patch in replaced:
    original = patching.original(patch.label)
    current = inspect.getattr_static(patch.owner, patch.attr)
    current = current.__func__ if isinstance(current, staticmethod) else current
    assert current is not original, patch.label
    assert tuple(inspect.signature(original).parameters) == patch.params, patch.label
    assert "servingctl" in current.__module__, patch.label
print(len(replaced))
"""


def test_apply_replaces_every_patched_attribute_once() -> None:
    result = subprocess.run([sys.executable, "-c", APPLY_CHECK], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert (
        int(result.stdout.split()[-1]) == len([p for p in patching.patches() if p.replacement is not None]) == 34
    )  # S3's UploadPart, PutObject, ListParts and Service Quotas' GetServiceQuota brought 27 to 31; StopExecution's
    # reason 32; ECS's StopTask and runTask.sync's stop with its execution 34


def test_cloudwatch_rounds_the_start_time_down_as_aws_does():
    from datetime import UTC, datetime, timedelta

    from servingctl_twin.cloudwatch.patches import rounded_start

    now = datetime(2026, 12, 7, 12, 40, tzinfo=UTC)
    start = datetime(2026, 12, 7, 12, 32, 34, tzinfo=UTC)  # AWS's example: 12:32:34
    assert rounded_start(start, 60, now) == datetime(2026, 12, 7, 12, 32, tzinfo=UTC)
    assert rounded_start(start, 10, now) == datetime(2026, 12, 7, 12, 32, 30, tzinfo=UTC)
    assert rounded_start(start, 60, start + timedelta(days=15)) == datetime(2026, 12, 7, 12, 30, tzinfo=UTC)
    assert rounded_start(start, 60, start + timedelta(days=63)) == datetime(2026, 12, 7, 12, tzinfo=UTC)
    assert rounded_start(start, 60, start + timedelta(days=15) - timedelta(seconds=1)) == datetime(
        2026, 12, 7, 12, 32, tzinfo=UTC
    )
