"""How far a sweep has come and how long the rest will take, from the time budgets.

Each case is expected to take its budget of timed work: --time-per-size in auto mode until the case
has been timed, then its planned iterations times its agreed sample time (more than the budget where
--min-iters decides). With fixed --iters a case not yet timed is expected to take what the timed ones
took on average. The ETA is the expected timed work left, scaled by the wall time spent so far per
second of expected timed work done (barriers, checks and set-up cost wall time too).
"""

from __future__ import annotations

import time

from commbench.results.display import Status


class SweepProgress:
    """Cases done of the total, and the ETA; fed by the runner on rank 0."""

    def __init__(self, total_cases: int, budget_s: float | None) -> None:
        self.total = total_cases
        self.done = 0
        self.budget_s = budget_s  # None: fixed iterations, nothing known before a case is timed
        self.unplanned = total_cases  # cases not timed yet
        self.planned_s = 0.0  # expected timed seconds of the timed cases, in total
        self.planned = 0
        self.left_s = 0.0  # expected timed seconds not yet run, of the timed cases
        self.spent_s = 0.0
        self.start = time.monotonic()

    def skip(self) -> None:
        """A case that turned out to repeat another (two sizes rounded to one) and will not run."""
        self.total -= 1
        self.unplanned -= 1

    def plan(self, expected_s: float) -> None:
        """A case was timed: it is expected to run `expected_s` seconds of timed work in all."""
        self.unplanned -= 1
        self.planned += 1
        self.planned_s += expected_s
        self.left_s += expected_s

    def ran(self, expected_s: float) -> None:
        """A block expected to take `expected_s` seconds ran."""
        self.left_s -= expected_s
        self.spent_s += expected_s

    def finish(self, unused_s: float = 0.0) -> None:
        """A case is done; `unused_s` of its expected time was not needed (--precision stopped it)."""
        self.done += 1
        self.left_s -= unused_s

    def eta_s(self) -> float | None:
        per_case = (
            self.budget_s if self.budget_s is not None else (self.planned_s / self.planned if self.planned else None)
        )
        if per_case is None or self.spent_s <= 0:
            return None
        left = max(self.left_s, 0.0) + self.unplanned * per_case
        return left * (time.monotonic() - self.start) / self.spent_s

    def status(self, label: str) -> Status:
        left = max(self.left_s, 0.0)
        per_case = self.budget_s or (self.planned_s / self.planned if self.planned else 0.0)
        whole = self.spent_s + left + self.unplanned * per_case
        return Status(self.done, self.total, self.spent_s / whole if whole > 0 else 0.0, self.eta_s(), label)
