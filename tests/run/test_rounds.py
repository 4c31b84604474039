"""Adaptive iterations and interleaved rounds: the ranks agree on the count, cases are visited in
rotation and their rounds pooled, noisy rows are flagged, and --iters N still means N.

The rotation tests run the real runner on one rank of a fake backend whose clock only moves when an
op says so: the order of visits and every sample's time are then known exactly, and nothing here
depends on how fast the machine is.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

from commbench.backends.base import Backend
from commbench.ops.args import CollArgs
from commbench.ops.spec import Point
from commbench.results.budget import Budget
from commbench.run.config import SweepConfig
from commbench.run.harness import TimedCase, blocks
from commbench.run.plan import rotation_groups
from commbench.run.watchdog import Watchdog
from tests.support.distributed import run_ranks
from tests.support.fakes import TICK_S, FakeBackend, Recording
from tests.support.sweeps import sweep_one_rank

# -- the iteration count ---------------------------------------------------------------------------


def test_planned_iterations_fill_the_budget_within_bounds() -> None:
    assert Budget(0.05, 10, 1000).samples(0.001) == 50
    assert Budget(0.05, 10, 1000).samples(0.2) == 10  # a slow case still gets --min-iters
    assert Budget(0.05, 10, 1000).samples(1e-7) == 1000
    assert blocks(20, 3) == [7, 7, 6] and blocks(2, 3) == [1, 1] and blocks(5, 1) == [5]


SLOW_CLOCK_S = 1.0  # what rank 1's clock adds to every reading: each of its samples reads 1 s longer
BUDGET_S = 3.0


def _agree_with_a_slow_clock(backend: Backend) -> tuple[float, int, list[int]]:
    """Warm up and plan one case on every rank, rank 1 with a clock that runs fast (its samples read
    a second longer than they took); then run the planned blocks."""
    if backend.rank == 1:
        real, reads = backend.clock, [0]

        def slow() -> float:
            reads[0] += 1
            return real() + SLOW_CLOCK_S * reads[0]

        backend.host_clock = lambda: slow  # type: ignore[method-assign]
    from commbench.ops.all_gather import AllGather

    op = AllGather()
    args = CollArgs(backend=backend, dtype=torch.float32, variant="flat")
    op.setup(args, Point.of_size(64))
    case = TimedCase(op, args, "comm", window=1, watchdog=Watchdog(60, backend.rank), label="agree")
    budget = Budget(BUDGET_S, 2, 1000, warmup=5)
    sample_s = case.warm_up(budget)
    iters = budget.samples(sample_s)
    for r, n in enumerate(blocks(iters, 2)):
        case.block(n, r, check=r == 1)
    return sample_s, iters, [len(block) for block in case.rounds_us] + [case.wrong]


@pytest.mark.slow
def test_ranks_agree_on_the_iteration_count_when_one_clock_reads_slower() -> None:
    # Alone, rank 0 (sub-millisecond samples) would plan 1000 iterations and rank 1 three: the ranks
    # would issue different numbers of collectives and hang. Agreed, both take rank 1's time.
    (t0, n0, b0), (t1, n1, b1) = run_ranks(_agree_with_a_slow_clock, 2)
    assert t0 == t1 and t0 >= SLOW_CLOCK_S
    assert n0 == n1 == Budget(BUDGET_S, 2, 1000).samples(t0) == 3
    assert b0 == b1 == [2, 1, 0]  # blocks of 2 and 1 samples; the check found nothing wrong


def _sweep_fake(tmp_path: Path, **config: Any) -> tuple[pd.DataFrame, list[list[tuple[str, int]]]]:
    """The runner's sweep of the recording op over 8, 1K and 4K on the fake backend; returns the rows
    written and the visits in order (each a list of the iterations it ran)."""
    # --raw: rank 0 keeps the per-rank samples, which the sink writes.
    cfg = SweepConfig(backend="gloo", ops=("all_gather",), sizes=(8, 1024, 4096), raw=True, **config)
    Recording.log = []
    visits: list[list[tuple[str, int]]] = []
    real_block = TimedCase.block

    def block(case: TimedCase, iters: int, round_index: int, check: bool = False, share: bool = True) -> None:
        case.args.state["visit"] = round_index
        start = len(Recording.log)
        real_block(case, iters, round_index, check, share)
        visits.append(Recording.log[start : start + iters])

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(TimedCase, "block", block)
        rows, progress = sweep_one_rank(tmp_path / "fake.csv", cfg, FakeBackend(), [Recording()])
    assert progress.done == progress.total == 6
    return rows, visits


def test_rounds_visit_every_case_in_rotation_and_pool_their_samples(tmp_path: Path) -> None:
    rows, visits = _sweep_fake(tmp_path, iters=9, rounds=3, warmup=1)
    cases = [(v, s) for s in (8, 1024, 4096) for v in ("a", "b")]
    # Each visit is one case's block of 3 samples; the visits go round the six cases three times.
    assert [visit[0] for visit in visits] == cases * 3
    assert all(len(visit) == 3 and set(visit) == {visit[0]} for visit in visits)
    assert (rows["iters"] == 9).all() and (rows["rounds"] == 3).all()
    assert list(zip(rows["variant"], rows["size_bytes"])) == cases  # rows in sweep order
    # The row pools its three rounds; each round's p50 is recorded too.
    assert rows["time_us_p50_rounds"].str.count(";").eq(2).all()
    raw = pd.read_csv(tmp_path / "fake.raw.csv")
    one = raw[(raw["variant"] == "a") & (raw["size_bytes"] == 8)]
    assert one["round"].tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2] and one["iteration"].tolist() == list(range(9))


def test_auto_iterations_fill_the_time_budget(tmp_path: Path) -> None:
    # A budget of 2^-7 s: 8 B takes TICK_S x (1 + 2^-7) per iteration (63.5 fit: 64, capped at 60),
    # 4 KB takes 5 TICK_S (12.8 fit: 13).
    rows, _ = _sweep_fake(tmp_path, time_per_size=2.0**-7, min_iters=4, max_iters=60, rounds=2)
    iters = dict(zip(zip(rows["variant"], rows["size_bytes"]), rows["iters"]))
    assert iters[("a", 8)] == iters[("b", 8)] == 60
    assert iters[("a", 4096)] == 13
    assert (rows["rounds"] == 2).all()


def test_a_case_whose_rounds_disagree_is_flagged_noisy(tmp_path: Path) -> None:
    # One case runs three times slower in its second round, as if the machine were busy meanwhile.
    Recording.slow = {("b", 1024, 1): 3.0}
    try:
        rows, _ = _sweep_fake(tmp_path, iters=12, rounds=3, warmup=1)
    finally:
        Recording.slow = {}
    noisy = rows[rows["note"].fillna("").str.contains("noisy")]
    assert list(zip(noisy["variant"], noisy["size_bytes"])) == [("b", 1024)]
    assert "rounds' means differ 3.00x" in noisy["note"].iloc[0]


def test_fixed_iterations_mean_exactly_that_many(tmp_path: Path) -> None:
    for rounds in (1, 4):
        rows, visits = _sweep_fake(tmp_path / str(rounds), iters=7, rounds=rounds, warmup=0)
        assert (rows["iters"] == 7).all() and sum(map(len, visits)) == 7 * 6
        assert (rows["rounds"] == min(rounds, 7)).all()


def test_precision_stops_a_steady_row_early(tmp_path: Path) -> None:
    # The fake clock makes every sample of a case identical: the interval is 0 wide at once.
    rows, _ = _sweep_fake(tmp_path, time_per_size=0.05, max_iters=400, min_iters=10, rounds=3, precision=0.02)
    planned = [Budget(0.05, 10, 400).samples(TICK_S * (1 + s / 1024)) for s in rows["size_bytes"]]
    assert (rows["rounds"] == 2).all()  # stopped in its second round, the first it may stop in
    assert (rows["iters"] < [p * 0.7 for p in planned]).all()


def test_rotation_groups_respect_the_memory_cap() -> None:
    points = [Point.of_size(s << 20) for s in (1, 8, 16, 32, 64)]
    groups = rotation_groups(points, ["a", "b"], lambda point, variant: point.size_bytes)
    # Up to 64 MiB of buffers rotate together; the largest case (64 MiB) goes alone.
    assert [[(p.size_bytes >> 20, v) for p, v in g] for g in groups] == [
        [(1, "a"), (1, "b"), (8, "a"), (8, "b"), (16, "a"), (16, "b")],
        [(32, "a"), (32, "b")],
        [(64, "a")],
        [(64, "b")],
    ]


def test_config_validates_the_new_options() -> None:
    base = SweepConfig(backend="gloo", ops=("all_gather",), sizes=(8,))
    for bad, words in (
        ({"min_iters": 0}, "--min-iters"),
        ({"min_iters": 10, "max_iters": 5}, "--max-iters (5) is below --min-iters (10)"),
        ({"time_per_size": 0}, "--time-per-size"),
        ({"rounds": 0}, "--rounds"),
        ({"precision": 1.5}, "--precision"),
    ):
        with pytest.raises(Exception, match=words.replace("(", r"\(").replace(")", r"\)")):
            dataclasses.replace(base, **bad)
    assert base.auto and SweepConfig.from_json(base.to_json()) == base


def test_a_case_stopped_before_its_last_round_is_marked_stopped_never_ok(tmp_path: Path) -> None:
    # Ctrl-C in the second round: every case has measured a block, none has run its check (the last round's).
    cfg = SweepConfig(backend="gloo", ops=("all_gather",), sizes=(8, 1024, 4096), iters=6, rounds=3, warmup=0)
    real_block = TimedCase.block

    def block(case: TimedCase, iters: int, round_index: int, check: bool = False, share: bool = True) -> None:
        if round_index == 1 and case.args.variant == "b" and case.size_bytes == 1024:
            raise KeyboardInterrupt
        real_block(case, iters, round_index, check, share)

    path = tmp_path / "stopped.csv"
    with pytest.MonkeyPatch.context() as mp, pytest.raises(KeyboardInterrupt):
        mp.setattr(TimedCase, "block", block)
        sweep_one_rank(path, cfg, FakeBackend(), [Recording()])
    rows = pd.read_csv(path)
    assert len(rows) == 6 and set(rows.status) == {"stopped"} and (rows.wrong == -1).all()
    # The first round was shared by every rank; the second was in progress, its blocks (a at 8 and
    # 1024 bytes, b at 8) held by each rank alone: those rows add rank 0's own samples, and say so.
    rounds = {key: note.split("; ")[-1] for key, note in zip(zip(rows.variant, rows.size_bytes), rows.note)}
    own = "stopped after 2 of 3 rounds (the last of them rank 0's own samples: the ranks had not shared it)"
    assert rounds[("a", 8)] == rounds[("b", 8)] == rounds[("a", 1024)] == f"{own}, its check not run"
    assert rounds[("b", 1024)] == rounds[("b", 4096)] == "stopped after 1 of 3 rounds, its check not run"
    assert dict(zip(zip(rows.variant, rows.size_bytes), rows.iters)) == {
        ("a", 8): 4,
        ("b", 8): 4,
        ("a", 1024): 4,
        ("b", 1024): 2,
        ("a", 4096): 2,
        ("b", 4096): 2,
    }
