"""What every test shares: no test files a run in the repository's own history.

A run's default history is results/history.sqlite in the current folder (commbench/history/store.py's
history_location), and the tests run commands from the repository root; COMMBENCH_HISTORY, the
documented way to name the default, points each test at its own temporary folder instead. A test
of the default location itself removes it and runs in a temporary folder.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _own_history(tmp_path, monkeypatch):
    monkeypatch.setenv("COMMBENCH_HISTORY", str(tmp_path / "history.sqlite"))
