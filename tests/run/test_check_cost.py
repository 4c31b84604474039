"""What a row's correctness check costs: in blocking mode it counts the wrong elements of the first
warm-up sample (one fresh iteration after the warm-up's fill), so a row makes no fill and no op
iteration of its own for it; with a window of several ops per sample it keeps its own fill and
iteration. Either way its count is summed over ranks in one exchange after the row's last block.
Counted on the runner's sweep of a counting op on the one-rank fake backend, whose control
exchanges are counted too."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from commbench.ops.args import CollArgs
from commbench.run.config import SweepConfig
from tests.support.fakes import FakeBackend, Recording
from tests.support.sweeps import sweep_one_rank

SIZES = (8, 1024)
ITERS, WARMUP, ROUNDS = 9, 2, 3


class CountingBackend(FakeBackend):
    """The fake backend, counting its control exchanges (reduce_floats) by op ("max", "sum")."""

    def __init__(self) -> None:
        super().__init__()
        self.exchanges: Counter[str] = Counter()

    def reduce_floats(self, values: Sequence[float], op: str) -> list[float]:
        self.exchanges[op] += 1
        return super().reduce_floats(values, op)


class Counting(Recording):
    """The recording op, counting fills, iterations and checks per case; the check sees which
    iteration it follows (`since_fill`: iterations since the last fill)."""

    counts: ClassVar[Counter[tuple[str, str]]] = Counter()
    checked_after: ClassVar[list[int]] = []

    def setup(self, args: CollArgs, point: Any) -> None:
        super().setup(args, point)
        args.state["since_fill"] = 0

    def fill(self, args: CollArgs) -> None:
        self.counts[("fill", args.variant)] += 1
        args.state["since_fill"] = 0

    def issue(self, args: CollArgs, phase: str) -> None:
        self.counts[("iteration", args.variant)] += 1
        args.state["since_fill"] += 1
        super().issue(args, phase)

    def wrong(self, args: CollArgs, phase: str) -> int:
        self.counts[("check", args.variant)] += 1
        self.checked_after.append(args.state["since_fill"])
        return 0


def _per_row(tmp_path: Path, mode: str, window: int = 1) -> tuple[dict[str, float], dict[str, float], list[int]]:
    """Fills, iterations and checks per row, control exchanges per row, and what each check followed."""
    Counting.counts, Counting.checked_after = Counter(), []
    backend = CountingBackend()
    cfg = SweepConfig(
        backend="gloo",
        ops=("all_gather",),
        sizes=SIZES,
        iters=ITERS,
        warmup=WARMUP,
        rounds=ROUNDS,
        mode=mode,
        window=window,
    )
    rows, _ = sweep_one_rank(tmp_path / f"{mode}.csv", cfg, backend, [Counting()])
    n = len(rows)
    assert n == len(SIZES) * len(Counting.variants) and (rows["wrong"] == 0).all()
    per_row = {
        kind: sum(v for (k, _), v in Counting.counts.items() if k == kind) / n
        for kind in ("fill", "iteration", "check")
    }
    return per_row, {op: count / n for op, count in backend.exchanges.items()}, Counting.checked_after


def test_blocking_rows_check_the_first_warm_up_sample_at_no_fill_or_iteration_of_their_own(
    tmp_path: Path,
) -> None:
    per_row, exchanges, checked_after = _per_row(tmp_path, "blocking")
    # The warm-up's fill, its iterations and the timed ones: nothing more for the check.
    assert per_row == {"fill": 1, "iteration": WARMUP + ITERS, "check": 1}
    assert checked_after == [1] * 4  # the iteration right after the fill: one application, fresh
    # One max per block; the wrong count's sum over ranks after the last block.
    assert exchanges == {"max": ROUNDS, "sum": 1}


def test_a_window_of_several_ops_keeps_a_fresh_iteration_of_its_own_for_the_check(tmp_path: Path) -> None:
    window = 3
    per_row, _, checked_after = _per_row(tmp_path, "nonblocking", window)
    # Several applications per sample would leave an in-place op's result applied `window` times.
    assert per_row == {"fill": 2, "iteration": (WARMUP + ITERS) * window + 1, "check": 1}
    assert checked_after == [1] * 4
