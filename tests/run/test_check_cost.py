"""What a row's correctness check costs: in blocking mode it counts the wrong elements of the first
warm-up sample (one fresh iteration after the warm-up's fill), so a row makes no fill and no op
iteration of its own for it; with a window of several ops per sample it keeps its own fill and
iteration. Either way its count rides in the last block's exchange of the samples' maxima, and
only a row with a wrong element sums the counts in an exchange of its own. Counted on the runner's sweep of a counting op on the one-rank fake backend, whose control
exchanges are counted too."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from commbench.ops.all_gather import AllGather
from commbench.ops.args import CollArgs, complete
from commbench.ops.base import IssueOp
from commbench.ops.spec import Point
from commbench.run.config import SweepConfig
from commbench.run.groups import group_view
from commbench.run.harness import measure
from commbench.run.watchdog import Watchdog
from tests.support.distributed import run_ranks
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
    # One max per round for the blocks of every row at once, the last one with the wrong counts in
    # it: no rank found one, so no sum.
    assert exchanges == {"max": ROUNDS / (len(SIZES) * len(Counting.variants))}


def test_a_window_of_several_ops_keeps_a_fresh_iteration_of_its_own_for_the_check(tmp_path: Path) -> None:
    window = 3
    per_row, _, checked_after = _per_row(tmp_path, "nonblocking", window)
    # Several applications per sample would leave an in-place op's result applied `window` times.
    assert per_row == {"fill": 2, "iteration": (WARMUP + ITERS) * window + 1, "check": 1}
    assert checked_after == [1] * 4


class _CorruptOnGroupRank1(IssueOp, AllGather):
    """An all_gather that bumps one element of its result on its group's rank 1 only."""

    def issue(self, args: CollArgs, phase: str) -> None:
        AllGather.issue(self, args, phase)
        complete(args)
        if args.rank == 1:
            args.output.view(-1)[-1] += 1


def _counts_in_pair_groups(backend: Any) -> list[tuple[int, int]]:
    """(wrong, sum exchanges) of a correct and of a corrupted all_gather measured in the pair groups
    [0, 2] and [1, 3], as `commbench isolate` and `--group` run ops: the op sees its group's rank
    and size, the reduction of the samples spans the world."""
    import torch.distributed as dist

    groups = [[0, 2], [1, 3]]
    mine, _ = dist.new_subgroups_by_enumeration(groups)
    view = group_view(backend, mine, next(g for g in groups if backend.rank in g))
    sums = Counter[str]()
    reduce_floats = backend.reduce_floats

    def counting(values: Sequence[float], op: str) -> list[float]:
        sums[op] += 1
        return reduce_floats(values, op)

    view.reduce_floats = counting  # type: ignore[method-assign]
    found = []
    for op in (AllGather(), _CorruptOnGroupRank1()):
        args = CollArgs(backend=view, dtype=torch.float32, variant="flat")
        op.setup(args, Point.of_size(1024))
        before = sums["sum"]
        m = measure(
            op,
            args,
            "comm",
            iters=3,
            warmup=2,
            window=1,
            check=True,
            watchdog=Watchdog(60, backend.rank),
            label="pairs",
        )
        found.append((m.wrong, sums["sum"] - before))
    return found


@pytest.mark.slow
def test_the_wrong_counts_of_ops_in_groups_are_summed_over_the_world_and_only_where_one_is_wrong() -> None:
    # Group rank 1 is world rank 2 in one group and 3 in the other: two wrong elements in all.
    results = run_ranks(_counts_in_pair_groups, 4)
    assert all(found == [(0, 0), (2, 1)] for found in results), results
