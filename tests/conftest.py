"""What every test shares: the synthetic run most chart tests start from, and the rule that a test
which starts a process (ranks, launchers, servers, a script) is marked slow, so that the quick loop
(`python -m pytest -m 'not slow'`) stays quick and never waits on one."""

from __future__ import annotations

import multiprocessing.process
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.synth_results import CHART_CASES, synth_run


@pytest.fixture(autouse=True)
def _own_history(tmp_path, monkeypatch):
    """No test files a run in the repository's own history: a run's default history is
    results/history.sqlite in the current folder (history/store.py's history_location), and tests
    run commands from the repository root; COMMBENCH_HISTORY, the documented way to name the
    default, points each test at its own temporary folder instead. A test of the default location
    itself removes it and runs in a temporary folder."""
    monkeypatch.setenv("COMMBENCH_HISTORY", str(tmp_path / "history.sqlite"))


@pytest.fixture(autouse=True)
def _charts_in_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test not marked slow draws its charts in its own process: the pool that `plot` and `report`
    draw in (charts/plot.py's in_pool) starts processes, which the quick loop never waits on (the
    rule below). The slow tests keep the pool, and one compares it with this serial loop."""
    if request.node.get_closest_marker("slow") is None:
        monkeypatch.setattr("commbench.analysis.charts.plot.MAX_CHART_WORKERS", 1)


@pytest.fixture
def run_csv(tmp_path: Path) -> Path:
    """a.csv: one synthetic run of CHART_CASES (seed 1, no raw samples)."""
    return synth_run(tmp_path / "a.csv", CHART_CASES, seed=1, raw=False)


# -- a test not marked slow starts no process ------------------------------------------------------
# Watched from the test's setup to its teardown, so a process that a module-scoped fixture starts
# for it counts too. subprocess.Popen underlies run() and check_output(); multiprocessing's
# Process.start underlies pools and torch.multiprocessing.spawn.
_REAL = (subprocess.Popen.__init__, multiprocessing.process.BaseProcess.start)
_started: list[str] = []


def _popen(self: subprocess.Popen, args: Any, *rest: Any, **kwargs: Any) -> None:
    _started.append(f"subprocess: {args if isinstance(args, str) else ' '.join(map(str, args))}"[:120])
    _REAL[0](self, args, *rest, **kwargs)


def _start(self: multiprocessing.process.BaseProcess) -> None:
    _started.append(f"multiprocessing: {self.name}")
    _REAL[1](self)


def _watch(on: bool) -> None:
    subprocess.Popen.__init__, multiprocessing.process.BaseProcess.start = (_popen, _start) if on else _REAL  # type: ignore[method-assign]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _started.clear()
    _watch(item.get_closest_marker("slow") is None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    if nextitem is None:  # the session's fixtures end now (tests/history's PostgreSQL server stops): not the test's
        _watch(False)
    try:
        return (yield)
    finally:
        _watch(False)
        if _started:
            first = _started[0]
            _started.clear()
            pytest.fail(f"this test starts a process ({first}) but is not marked @pytest.mark.slow", pytrace=False)
