"""The iteration budget: how many warm-up and timed samples a case gets.

One object for everyone who sizes a case: the harness (the warm-up it runs and the samples it then
plans), `commbench isolate` (the same, per exchange), the ETA (what the cases still to run will
cost) and the noise advice (what another budget would give, read back from a CSV's command line).
Torch-free, so that a report reading CSVs can use it.

--iters auto: each (variant, phase, size) gets DEFAULT_TIME_PER_SIZE seconds of timed work, within
[DEFAULT_MIN_ITERS, DEFAULT_MAX_ITERS] iterations. docs/measurement.md says how these were chosen.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass

DEFAULT_TIME_PER_SIZE = 0.01
DEFAULT_MIN_ITERS = 10
DEFAULT_MAX_ITERS = 1000
DEFAULT_WARMUP = 5
# Auto mode's warm-up stops early once it has taken this share of the time budget: a 100 ms
# collective needs one warm-up iteration, not five, before its ten timed ones.
WARMUP_SHARE = 0.5


@dataclass(frozen=True)
class Budget:
    """What decides the number of samples of each case: the auto budget and its bounds, or --iters;
    and --warmup."""

    time_per_size: float = DEFAULT_TIME_PER_SIZE
    min_iters: int = DEFAULT_MIN_ITERS
    max_iters: int = DEFAULT_MAX_ITERS
    iters: int | None = None  # a fixed count: --iters N; None: auto, from the time budget
    warmup: int = DEFAULT_WARMUP

    @property
    def auto(self) -> bool:
        """Samples from the time budget (--iters auto) rather than a fixed count."""
        return self.iters is None

    def filling(self, sample_s: float) -> float:
        """Samples that fill the time budget at `sample_s` seconds each, within [min_iters,
        max_iters], not rounded (the noise advice weighs other budgets with it)."""
        wanted = self.time_per_size / sample_s if sample_s > 0 else self.max_iters
        return max(self.min_iters, min(self.max_iters, wanted))

    def samples(self, sample_s: float) -> int:
        """Timed samples of a case whose samples take `sample_s` seconds: --iters, or the budget's."""
        if self.iters is not None:
            return self.iters
        return math.ceil(self.filling(sample_s))

    def warmup_samples(self, sample_s: float) -> int:
        """Warm-up samples of such a case: --warmup, or in auto mode at least one (it times the case)
        and no more than WARMUP_SHARE of the budget."""
        if not self.auto:
            return self.warmup
        return min(max(self.warmup, 1), 1 + math.floor(WARMUP_SHARE * self.time_per_size / max(sample_s, 1e-9)))

    @classmethod
    def from_command(cls, command: str) -> Budget:
        """The budget a recorded command line asked for (the CSV's command column); defaults where
        it says nothing."""
        try:
            words = shlex.split(command or "")
        except ValueError:
            words = str(command).split()
        values: dict[str, str] = {}
        for i, word in enumerate(words):
            flag, _, inline = word.partition("=")
            if flag in ("--time-per-size", "--min-iters", "--max-iters", "--iters", "-n"):
                value = inline or (words[i + 1] if i + 1 < len(words) else "")
                values["--iters" if flag == "-n" else flag] = value
        try:
            iters = values.get("--iters", "auto")
            return cls(
                time_per_size=float(values.get("--time-per-size", cls.time_per_size)),
                min_iters=int(values.get("--min-iters", cls.min_iters)),
                max_iters=int(values.get("--max-iters", cls.max_iters)),
                iters=None if iters == "auto" else int(iters),
            )
        except ValueError:
            return cls()
