"""In-memory benchmark store with the DynamoDB store's semantics (tests, local tools)."""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

from servingctl.store.benchmarks import BenchmarkRun, StoredComparison, StoredScenario, apply_run_changes


class MemoryBenchmarkStore:
    """Dicts behind one mutex; every method hands out copies, like a database would."""

    def __init__(self) -> None:
        self._mutex = threading.RLock()
        self._runs: dict[str, BenchmarkRun] = {}
        self._scenarios: dict[tuple[str, str], StoredScenario] = {}
        self._comparisons: dict[tuple[str, str], StoredComparison] = {}

    def create_run(self, run: BenchmarkRun) -> BenchmarkRun:
        """Record a new run; creating the same run_id again returns the stored one unchanged."""
        with self._mutex:
            self._runs.setdefault(run.run_id, run.model_copy(deep=True))
            return self._runs[run.run_id].model_copy(deep=True)

    def get_run(self, run_id: str) -> BenchmarkRun | None:
        """One run, None when absent."""
        with self._mutex:
            found = self._runs.get(run_id)
            return found.model_copy(deep=True) if found else None

    def update_run(self, run_id: str, now: datetime, **changes: Any) -> BenchmarkRun:
        """Set the given fields of a run (KeyError when absent); returns the new record."""
        with self._mutex:
            if run_id not in self._runs:
                raise KeyError(f"no benchmark run {run_id!r}")
            self._runs[run_id] = apply_run_changes(self._runs[run_id], now, changes)
            return self._runs[run_id].model_copy(deep=True)

    def list_runs(self, profile: str | None = None, limit: int = 50) -> list[BenchmarkRun]:
        """Runs newest first (run ids sort by creation time), optionally of one profile."""
        with self._mutex:
            runs = [r for r in self._runs.values() if profile is None or r.profile == profile]
            return [r.model_copy(deep=True) for r in sorted(runs, key=lambda r: r.run_id, reverse=True)[:limit]]

    def put_scenario(self, scenario: StoredScenario) -> StoredScenario:
        """Write a scenario result (a rerun of the same scenario replaces it)."""
        with self._mutex:
            self._scenarios[(scenario.run_id, scenario.name)] = scenario.model_copy(deep=True)
            return scenario

    def list_scenarios(self, run_id: str) -> list[StoredScenario]:
        """The run's scenario results in run order."""
        with self._mutex:
            found = [s.model_copy(deep=True) for (r, _), s in self._scenarios.items() if r == run_id]
        return sorted(found, key=lambda s: (s.position, s.name))

    def put_comparison(self, comparison: StoredComparison) -> StoredComparison:
        """Write one scenario's cost comparison (replacing an earlier one)."""
        with self._mutex:
            self._comparisons[(comparison.run_id, comparison.scenario)] = comparison.model_copy(deep=True)
            return comparison

    def list_comparisons(self, run_id: str) -> list[StoredComparison]:
        """The run's cost comparisons, by scenario name."""
        with self._mutex:
            found = [c.model_copy(deep=True) for (r, _), c in self._comparisons.items() if r == run_id]
        return sorted(found, key=lambda c: c.scenario)
