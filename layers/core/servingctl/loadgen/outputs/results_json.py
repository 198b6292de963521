"""The results file (results.json): write a RunResult atomically, read one back with a schema
version guard, so a file from a newer servingctl fails clearly instead of being misread."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from pydantic import ValidationError

from servingctl.schema.results import SCHEMA_VERSION, RunResult

RESULTS_FILE = "results.json"


class ResultsFileError(ValueError):
    """A results file that cannot be read: missing, not JSON, unknown schema version or invalid."""


def write_results(run: RunResult, directory: Path | str) -> Path:
    """Write DIR/results.json (via a temporary file and rename: a crash never leaves half a file)."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    path = out / RESULTS_FILE
    fd, tmp = tempfile.mkstemp(prefix=".results-", suffix=".json", dir=out)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(run.model_dump_json(indent=1))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def results_path(path: Path | str) -> Path:
    """The results file for a path that is either the file or the directory holding results.json."""
    p = Path(path)
    return p / RESULTS_FILE if p.is_dir() else p


def read_results(path: Path | str) -> RunResult:
    """Read a results file (or DIR/results.json); ResultsFileError names the file and the problem."""
    file = results_path(path)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ResultsFileError(f"{file}: no such results file") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise ResultsFileError(f"{file}: not a readable JSON results file ({exc})") from None
    if not isinstance(data, dict):
        raise ResultsFileError(f"{file}: not a servingctl results file (top level is not an object)")
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ResultsFileError(
            f"{file}: schema_version {version!r} is not a servingctl results schema version "
            f"(this servingctl reads version {SCHEMA_VERSION})"
        )
    if version > SCHEMA_VERSION:
        raise ResultsFileError(
            f"{file}: schema_version {version} is newer than this servingctl understands "
            f"(it reads version {SCHEMA_VERSION}); upgrade servingctl to read it"
        )
    if version < SCHEMA_VERSION:
        raise ResultsFileError(
            f"{file}: schema_version {version} is older than this servingctl reads ({SCHEMA_VERSION}) "
            "and no migration exists for it"
        )
    try:
        return RunResult.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ResultsFileError(f"{file}: invalid at {where}: {err['msg']} ({exc.error_count()} errors)") from None
