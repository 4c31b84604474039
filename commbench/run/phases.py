"""Where a sweep's wall time goes: one accumulator of phase timers, and the `# time:` line built from it.

Rank 0's run layer times its phases with one PhaseClock (the session holds it; the harness, the
rotation and the sink time their steps through it). Phases nest: time spent in an inner phase is the
inner one's alone, so the totals never count a second twice and sum to the time spent inside any
phase. The process that owns the CSV (the launching process, or rank 0 under a launcher) adds what
only it sees (charts, the ranks' exit) and prints one `# time:` line whose categories, with an
`other` remainder, sum to its wall time. bench/sweep_time.py parses that line.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

# The categories in the order the line prints them, with what each one covers.
PHASES: dict[str, str] = {
    "startup": "start-up and rendezvous: imports, spawning, joining the group, agreeing on the configuration",
    "setup": "per-op set-up: allocating the buffers, binding the calls",
    "fill": "filling the input buffers (before warm-up, and before the check of a window of several ops)",
    "warmup": "the untimed warm-up samples (barrier, op, wait; each one like a timed sample)",
    "timed": "the timed blocks: every sample's untimed synchronise and barrier, and its timed op",
    "check": "the correctness check: the comparison of the first warm-up sample's result (a window of several ops: of a fresh iteration)",
    "control": "the control traffic after each round: the samples' maxima over ranks, the wrong counts",
    "progress": "the ETA, the progress line and the heartbeat's step",
    "history": "the results history and every host's environment record",
    "write": "writing the CSV rows and the printed table",
    "charts": "drawing the charts beside the CSV",
    "teardown": "closing the outputs, leaving the group, the ranks' exit",
}
OTHER = "other"
LINE_PREFIX = "# time:"


class PhaseClock:
    """Seconds per phase, accumulated as the sweep goes; `clock` is injectable so tests can drive it."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.began = clock()
        self.began_epoch = time.time()  # where the launching process places this clock's start
        self.totals: dict[str, float] = {}
        self._stack: list[str] = []
        self._since = 0.0

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as `name`; the enclosing phase stops accruing until the block is done."""
        now = self.clock()
        if self._stack:
            self._accrue(self._stack[-1], now)
        self._stack.append(name)
        self._since = now
        try:
            yield
        finally:
            now = self.clock()
            self._accrue(self._stack.pop(), now)
            self._since = now

    def add(self, name: str, seconds: float) -> None:
        """Seconds measured elsewhere (another process, or before this clock existed)."""
        self.totals[name] = self.totals.get(name, 0.0) + max(seconds, 0.0)

    def record(self) -> dict[str, object]:
        """What the owner of the CSV needs to place these phases in its own wall time (provenance's
        record_phases): when the clock began and ended (epoch seconds) and the totals."""
        return {"began": self.began_epoch, "ended": self.began_epoch + self.clock() - self.began, "totals": self.totals}

    def _accrue(self, name: str, now: float) -> None:
        self.totals[name] = self.totals.get(name, 0.0) + (now - self._since)


def time_line(totals: Mapping[str, float], wall_s: float) -> str:
    """The `# time:` line: the wall time, then each category's seconds and share of it, `other`
    the remainder (never negative: phases measured in another process may overlap this one's by a
    clock tick)."""
    known = {name: totals.get(name, 0.0) for name in PHASES}
    other = max(wall_s - sum(known.values()), 0.0)
    shown = {**known, OTHER: other}
    parts = [f"{name} {seconds:.2f} s ({_share(seconds, wall_s)})" for name, seconds in shown.items()]
    return f"{LINE_PREFIX} wall {wall_s:.2f} s = " + ", ".join(parts)


def parse_time_line(line: str) -> tuple[float, dict[str, float]] | None:
    """(wall seconds, seconds per category) of a `# time:` line; None for any other line."""
    if not line.startswith(LINE_PREFIX):
        return None
    head, _, rest = line[len(LINE_PREFIX) :].partition("=")
    try:
        wall = float(head.split()[1])
        totals = {}
        for part in rest.split(","):
            name, seconds = part.split()[:2]
            totals[name] = float(seconds)
    except (IndexError, ValueError):
        return None
    return wall, totals


def _share(seconds: float, wall_s: float) -> str:
    return f"{100 * seconds / wall_s:.1f}%" if wall_s > 0 else "-"
