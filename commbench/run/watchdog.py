"""A per-rank watchdog: a collective that does not finish in time ends the rank with a diagnosis.

torch's own timeouts do not fire on every wait path (async handles, coalesced and grouped calls),
so the harness arms this around every step and the thread ends the process when a step overruns.
Arming is two attribute writes: nothing on the hot path talks to another process.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Callable

from commbench.errors import ExitCode


class Watchdog:
    """Arm with a label before a step, disarm after; overrunning the timeout ends the process."""

    def __init__(
        self,
        timeout_s: float,
        rank: int,
        diagnose: Callable[[], str] | None = None,
        diagnosis_s: float | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        self.rank = rank
        self.diagnose = diagnose
        # Called before the process ends on a timeout, from the watchdog's thread while the main one
        # is stuck in the collective: rank 0 writes the rows its unfinished cases have so far.
        self.last_words: Callable[[], None] | None = None
        self.label = ""
        self.deadline = math.inf
        self.poll_s = poll_s(timeout_s)
        # How long the diagnosis may take before the exit goes ahead without it (the progress board
        # has its own, which grows with the world size: docs/scale.md).
        self.diagnosis_s = 4 * self.poll_s + 5 if diagnosis_s is None else diagnosis_s
        self._thread = threading.Thread(target=self._watch, name="commbench-watchdog", daemon=True)
        self._thread.start()

    def arm(self, label: str) -> None:
        self.label = label
        self.deadline = time.monotonic() + self.timeout_s

    def disarm(self) -> None:
        self.deadline = math.inf

    def _watch(self) -> None:
        while True:
            time.sleep(self.poll_s)
            if time.monotonic() > self.deadline:
                self._fire()

    def _fire(self) -> None:
        detail = bounded(self.diagnose, self.diagnosis_s) if self.diagnose is not None else ""
        sys.stderr.write(
            f"commbench: rank {self.rank}: timed out after {self.timeout_s:g}s in {self.label}"
            f"{'; ' + detail if detail else ''}\n"
        )
        sys.stderr.flush()
        if self.last_words is not None:
            bounded(lambda: str(self.last_words and self.last_words()), 5)
        os._exit(ExitCode.COLLECTIVE_FAILURE)


def poll_s(timeout_s: float) -> float:
    """How often a watchdog of this timeout looks at its deadline (and its rank's heartbeat beats)."""
    return min(1.0, max(0.05, timeout_s / 10))


def bounded(fn: Callable[[], str], seconds: float) -> str:
    """fn() on a helper thread, abandoned after `seconds`: the diagnosis is best effort, the exit is not.

    A diagnosis reads other processes' state (the progress store), which may itself be gone.
    """
    result = [f"(no diagnosis: the progress store did not answer within {seconds:.0f}s)"]

    def run() -> None:
        try:
            result[0] = fn()
        except Exception as exc:
            result[0] = f"(no diagnosis: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"

    thread = threading.Thread(target=run, name="commbench-diagnosis", daemon=True)
    thread.start()
    thread.join(seconds)
    return result[0]
