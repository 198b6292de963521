"""In-memory benchmark store with the DynamoDB store's semantics (tests, local tools)."""

from __future__ import annotations

import threading
from collections.abc import Collection
from datetime import datetime
from typing import Any

from servingctl.store.benchmarks import (
    LIVE,
    BenchmarkRun,
    ResultExists,
    RunEnded,
    RunStatus,
    StoredComparison,
    StoredScenario,
    apply_run_changes,
)


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

    def _expect(self, run_id: str, when: Collection[RunStatus]) -> None:
        found = self._runs.get(run_id)
        if found is None or found.status not in when:
            raise RunEnded(run_id, found.status if found else None, when)

    def update_run(
        self, run_id: str, now: datetime, *, when: Collection[RunStatus] | None = None, **changes: Any
    ) -> BenchmarkRun:
        """Set the given fields of a run (KeyError when absent), only while its status is one of
        `when` if given (RunEnded otherwise, nothing written); returns the new record."""
        with self._mutex:
            if run_id not in self._runs:
                raise KeyError(f"no benchmark run {run_id!r}")
            if when is not None:
                self._expect(run_id, when)
            self._runs[run_id] = apply_run_changes(self._runs[run_id], now, changes)
            return self._runs[run_id].model_copy(deep=True)

    def list_runs(self, profile: str | None = None, limit: int = 50) -> list[BenchmarkRun]:
        """Runs newest first (run ids sort by creation time), optionally of one profile."""
        with self._mutex:
            runs = [r for r in self._runs.values() if profile is None or r.profile == profile]
            return [r.model_copy(deep=True) for r in sorted(runs, key=lambda r: r.run_id, reverse=True)[:limit]]

    def put_scenario(self, scenario: StoredScenario, replacing: str | None = None) -> StoredScenario:
        """Write a finished scenario while its run is RUNNING (RunEnded otherwise): once (ResultExists
        when it is written already), or, with `replacing`, over the stored result whose records_key
        that is and nothing else (the shard merge over the single-worker result it read)."""
        key = (scenario.run_id, scenario.name)
        with self._mutex:
            self._expect(scenario.run_id, LIVE)
            stored = self._scenarios.get(key)
            if (stored is not None) if replacing is None else (stored is None or stored.records_key != replacing):
                raise ResultExists(scenario.run_id, f"scenario {scenario.name}")
            self._scenarios[key] = scenario.model_copy(deep=True)
            return scenario

    def get_scenario(self, run_id: str, name: str) -> StoredScenario | None:
        """One scenario result, None when not written."""
        with self._mutex:
            found = self._scenarios.get((run_id, name))
            return found.model_copy(deep=True) if found else None

    def list_scenarios(self, run_id: str) -> list[StoredScenario]:
        """The run's scenario results in run order."""
        with self._mutex:
            found = [s.model_copy(deep=True) for (r, _), s in self._scenarios.items() if r == run_id]
        return sorted(found, key=lambda s: (s.position, s.name))

    def put_comparison(self, comparison: StoredComparison) -> StoredComparison:
        """Write one scenario's cost comparison once, while its run is RUNNING (ResultExists, RunEnded)."""
        key = (comparison.run_id, comparison.scenario)
        with self._mutex:
            self._expect(comparison.run_id, LIVE)
            if key in self._comparisons:
                raise ResultExists(comparison.run_id, f"comparison {comparison.scenario}")
            self._comparisons[key] = comparison.model_copy(deep=True)
            return comparison

    def list_comparisons(self, run_id: str) -> list[StoredComparison]:
        """The run's cost comparisons, by scenario name."""
        with self._mutex:
            found = [c.model_copy(deep=True) for (r, _), c in self._comparisons.items() if r == run_id]
        return sorted(found, key=lambda c: c.scenario)
