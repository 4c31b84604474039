"""The progress count and the ETA, on the real runner with a fake clock.

A fake transport charges its fake clock what a shared machine charges a real sweep: an untimed
barrier before every sample, an exchange after every block, a fill that grows with the size, and
collectives that cost a latency plus a time per byte, a few percent of noise on each, and slow
spells (2 s of every 10 at 1.5x). The ETA knows none of these numbers: at 25%, 50% and 75% of the run
it must be within 30% of the time that is really left (for a mix of ops: given the last run's times, or
without them once the ops have begun).
"""

from __future__ import annotations

import math
import random
import statistics
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from commbench.console.display import Status
from commbench.ops.args import CollArgs
from commbench.ops.spec import BusFactor, OpSpec, Point
from commbench.results.budget import Budget
from commbench.run import eta
from commbench.run.config import SweepConfig
from commbench.run.eta import SweepProgress
from commbench.run.groups import Grouping
from commbench.run.plan import SweepPlan, eta_prior
from tests.support.fakes import FakeBackend, Recording
from tests.support.sweeps import sweep_one_rank

BARRIER_S = 300e-6  # an untimed barrier before every sample (as on 2 busy cores)
EXCHANGE_S = 1e-3  # sharing a block's samples between ranks
FILL_BYTES_PER_S = 2e9  # filling the inputs once per case
SIZES = tuple(8 * 4**k for k in range(12))  # 8 B .. 32 MB, every other size of a default sweep


class Machine(FakeBackend):
    """The fake transport with a machine's costs; the clock moves only through them."""

    def __init__(self, seed: int = 7, pace: float = 1.0, spell_offset_s: float = 0.0) -> None:
        super().__init__()
        self.rng = random.Random(seed)
        self.pace = pace  # a machine busier (>1) or quieter than on another day
        self.spell_offset_s = spell_offset_s  # where the slow spells fall against the run's start

    def spend(self, seconds: float) -> None:
        # Slow spells, as other jobs come and go: 2 s of every 10 everything takes 1.5x longer.
        slow = 1.5 if (self.now + self.spell_offset_s) % 10.0 >= 8.0 else 1.0
        self.now += seconds * self.pace * slow * math.exp(self.rng.gauss(0.0, 0.05))

    def barrier(self) -> None:
        self.spend(BARRIER_S)

    def all_gather_object(self, obj: Any) -> list[Any]:
        self.spend(EXCHANGE_S)
        return [obj]


def _collective(latency_s: float, bytes_per_s: float, variants: tuple[str, ...], name: str) -> type[Recording]:
    """An op costing latency + S / bandwidth per iteration, on the fake machine."""

    class Collective(Recording):
        spec = OpSpec(
            name=name,
            summary="a collective with a latency and a bandwidth",
            s_definition="S = size",
            bus_factor=BusFactor("1", lambda n: 1.0),
            variants=variants,
        )

        def setup(self, args: CollArgs, point: Point) -> None:
            args.count = max(1, point.size_bytes // 4)
            args.state = {"size": point.size_bytes}

        def fill(self, args: CollArgs) -> None:
            args.backend.spend(args.state["size"] / FILL_BYTES_PER_S)

        def issue(self, args: CollArgs, phase: str) -> None:
            args.backend.spend(latency_s + args.state["size"] / bytes_per_s)

    return Collective


# The ops of a default sweep, in its order, with their variants, latency (p50 at 8 B) and time at
# 64 MB as 2 Gloo ranks on a shared 2-core machine measured them: the ETA meets a real sweep's
# mix, its slowest op first and an 8x spread between ops.
MEASURED = (
    ("all_gather", 3, 365e-6, 161.9e-3),
    ("all_reduce", 1, 335e-6, 86.8e-3),
    ("all_to_all", 3, 242e-6, 31.7e-3),
    ("broadcast", 1, 279e-6, 34.2e-3),
    ("gather", 1, 231e-6, 101.5e-3),
    ("reduce", 1, 270e-6, 82.4e-3),
    ("reduce_scatter_base", 3, 418e-6, 142.7e-3),
    ("scatter", 1, 229e-6, 19.2e-3),
    ("sendrecv", 2, 2025e-6, 54.8e-3),
)
OPS = tuple(
    _collective(latency, (64 << 20) / (at_64m - latency), tuple(f"v{i}" for i in range(variants)), f"{name}_like")
    for name, variants, latency, at_64m in MEASURED
)


def _sweep_with_a_fake_clock(
    tmp_path: Path,
    ops: tuple[type[Recording], ...] = OPS,
    machine: Machine | None = None,
    before: pd.DataFrame | None = None,
) -> tuple[SweepProgress, list[tuple[float, Status]], float]:
    """Run the real runner over the ops on the fake machine (its rows in tmp_path/eta.csv; `before`:
    the rows of an earlier run, the ETA's prior); every progress status with its time."""
    cfg = SweepConfig(backend="gloo", ops=("all_gather",), sizes=SIZES)
    backend = machine or Machine()
    seen: list[tuple[float, Status]] = []

    def watch(progress: SweepProgress) -> None:
        real_status = progress.status

        def status(label: str) -> Status:
            result = real_status(label)
            seen.append((backend.now, result))
            return result

        progress.status = status  # type: ignore[method-assign]

    ops_here = [op() for op in ops]
    _, progress = sweep_one_rank(tmp_path / "eta.csv", cfg, backend, ops_here, watch=watch, before=before)
    return progress, seen, backend.now


def _errors(seen: list[tuple[float, Status]], end: float) -> dict[float, float]:
    """The ETA's error relative to the time really left, at 25%, 50% and 75% of the run."""
    errors = {}
    for share in (0.25, 0.5, 0.75):
        at, status = next((t, s) for t, s in seen if t >= share * end)
        assert status.eta_s is not None
        errors[share] = abs(status.eta_s - (end - at)) / (end - at)
    return errors


def test_the_eta_of_one_op_is_within_30_percent_of_the_time_left_at_25_50_and_75_percent(tmp_path: Path) -> None:
    _, seen, end = _sweep_with_a_fake_clock(tmp_path, OPS[:1])  # all_gather's three variants
    assert 2 < end < 20  # a short sweep: seconds of fake time
    assert all(error <= 0.3 for error in _errors(seen, end).values()), _errors(seen, end)


SPELL_OFFSETS_S = (0.0, 2.5, 5.0, 7.5)


@pytest.mark.slow  # starts processes, or runs whole fake sweeps: outside the quick loop
def test_the_eta_of_a_default_sweeps_op_mix_holds_once_the_ops_have_begun(tmp_path: Path) -> None:
    # An op not measured yet is predicted from those measured before it. At a quarter of this run
    # only all_gather, the slowest op, has been: the ETA is then high, by less than 2x; from half-way
    # on the ops have shown their own costs and it is within 30%. Without a history an op's first
    # sizes predict the next op's: where a slow spell lands on them moves the ETA, so the run is
    # repeated with the spells at four places against its start, and the typical error is judged.
    runs = []
    for offset in SPELL_OFFSETS_S:
        _, seen, end = _sweep_with_a_fake_clock(tmp_path / f"at{offset}", machine=Machine(spell_offset_s=offset))
        runs.append(_errors(seen, end))
    assert all(errors[0.25] < 1.0 for errors in runs), runs
    assert all(statistics.median(errors[share] for errors in runs) <= 0.3 for share in (0.5, 0.75)), runs


@pytest.mark.slow  # starts processes, or runs whole fake sweeps: outside the quick loop
def test_with_the_last_runs_times_the_eta_of_the_op_mix_is_within_30_percent_throughout(tmp_path: Path) -> None:
    # The second run of a sweep finds the first in its history: every op's cost is known before the
    # op begins, scaled by how this run compares (here the machine is 1.3x busier and its noise and
    # spells fall elsewhere).
    _sweep_with_a_fake_clock(tmp_path / "first", machine=Machine(seed=7))
    before = pd.read_csv(tmp_path / "first" / "eta.csv", keep_default_na=False)
    _, seen, end = _sweep_with_a_fake_clock(tmp_path / "second", machine=Machine(seed=11, pace=1.3), before=before)
    errors = _errors(seen, end)
    assert all(error <= 0.3 for error in errors.values()), errors


def test_the_prior_matches_op_variant_phase_dtype_and_the_nearest_size_within_2x() -> None:
    cfg = SweepConfig(backend="gloo", ops=("all_gather",), sizes=(8, 64))
    grouping = Grouping("world", 1, Machine())
    op = OPS[0]()
    common = {"op": op.name, "phase": op.phases[0], "dtype": "float32", "status": "ok"}
    rows = pd.DataFrame(
        [
            {**common, "variant": "v0", "size_bytes": 8, "time_us_p50": 100.0},
            {**common, "variant": "v1", "size_bytes": 8, "time_us_p50": 300.0},
            {**common, "variant": "v0", "size_bytes": 256, "time_us_p50": 900.0},  # 4x from 64 B: too far
            {**common, "variant": "v2", "size_bytes": 8, "time_us_p50": 200.0, "status": "wrong"},
        ]
    )
    plan = SweepPlan(cfg, grouping, [op])
    prior = eta_prior(plan, rows)
    works = sorted({w for _, w in plan.cases()})
    assert prior == {(op.name, works[0]): pytest.approx(200e-6)}  # v0 and v1 averaged; v2 was wrong


def test_the_total_is_fixed_up_front_and_reached_at_the_end(tmp_path: Path) -> None:
    progress, seen, _ = _sweep_with_a_fake_clock(tmp_path, OPS[:2])
    totals = {status.total for _, status in seen}
    assert totals == {len(SIZES) * 4}  # every (variant, size) of the ops, announced once
    assert progress.done == progress.total
    counts = [status.done for _, status in seen]
    assert counts == sorted(counts)  # never goes back


def test_merged_and_refused_cases_count_as_done_without_changing_the_total() -> None:
    clock = [0.0]
    progress = SweepProgress([("op", 8), ("op", 8), ("op", 16)], Budget(0.01), clock=lambda: clock[0])
    progress.skip("op", 8)  # 8 B and a size that rounds to it: measured once
    progress.warmed_up("a", "op", 8, 10, 1e-3)
    progress.ran("a", 10)
    clock[0] = 0.05
    progress.skip("op", 16, "b")  # refused before it was planned
    progress.finish("a")
    assert (progress.done, progress.total) == (3, 3)
    assert progress.status("x").eta_s == 0.0


def test_no_eta_before_anything_is_timed_and_a_fraction_from_the_count() -> None:
    progress = SweepProgress([("op", 8)] * 4, Budget(iters=10), clock=lambda: 0.0)
    status = progress.status("first")
    assert status.eta_s is None and status.text().startswith("0/4 cases, ETA --:--")


def test_rows_of_the_fake_sweep_are_the_cases(tmp_path: Path) -> None:
    _sweep_with_a_fake_clock(tmp_path, OPS[:1])
    rows = pd.read_csv(tmp_path / "eta.csv")
    assert len(rows) == len(SIZES) * 3 and (rows["status"] == "ok").all()


class _FromScratch(SweepProgress):
    """The estimate as computed before its parts were memoised: every op's curve rebuilt and every
    visit scanned for each pending case (which made the ETA cost more than the samples)."""

    def _curve(self, op: str) -> tuple[list[int], list[float]]:
        by_work = self.timed.get(op, {})
        works = sorted(by_work)
        return works, [statistics.median(by_work[s]) for s in works]

    def _per_work(self) -> float:
        slopes = [slope for op in self.timed if (slope := eta._slope(*self._curve(op))) is not None]
        return statistics.median(slopes) if slopes else 0.0

    def _rate(self, work: int, overall: float, visits: Any) -> float:
        near = [v for v in self.visits if work / eta.SIMILAR_WORK <= v.work <= work * eta.SIMILAR_WORK]
        cost = sum(v.timed_s + v.samples * self._barrier() for v in near)
        if len(near) < eta.SIMILAR_VISITS or cost <= 0:
            return overall
        return sum(v.wall_s for v in near) / cost


def test_the_memoised_estimate_is_the_one_computed_from_scratch_at_every_report(tmp_path: Path) -> None:
    pairs: list[tuple[float | None, float | None]] = []

    def watch(progress: SweepProgress) -> None:
        real_status = progress.status
        progress.estimate_every_s = 0.0  # an estimate at every report, to compare with

        def status(label: str) -> Status:
            result = real_status(label)
            progress.__class__ = _FromScratch  # the same state, estimated the old way
            try:
                pairs.append((result.eta_s, progress._estimate()[1]))
            finally:
                progress.__class__ = SweepProgress
            return result

        progress.status = status  # type: ignore[method-assign]

    cfg = SweepConfig(backend="gloo", ops=("all_gather",), sizes=SIZES)
    sweep_one_rank(tmp_path / "eta.csv", cfg, Machine(), [op() for op in OPS[:3]], watch=watch)
    assert len(pairs) > 100 and sum(memo is not None for memo, _ in pairs) > 100
    for memo, scratch in pairs:
        assert (memo is None and scratch is None) or math.isclose(memo, scratch, rel_tol=1e-9), (memo, scratch)


def test_between_two_estimates_the_last_one_stands_less_the_time_since() -> None:
    now = [0.0]
    progress = SweepProgress([("op", 8), ("op", 64)], Budget(), clock=lambda: now[0])
    progress.warmed_up("a", "op", 8, 10, 1e-3)
    now[0] += 1.0
    progress.ran("a", 10)
    first = progress.status("first")
    assert first.eta_s is not None
    now[0] += 0.1  # within ESTIMATE_EVERY_S: not worked out again
    progress.finish("a")
    second = progress.status("second")
    assert second.eta_s == pytest.approx(max(first.eta_s - 0.1, 0.0))
    assert (second.done, second.label) == (1, "second")  # the count and the label are always current
    now[0] += eta.ESTIMATE_EVERY_S
    assert progress.status("third").fraction != first.fraction  # worked out afresh


def test_the_prior_comes_from_the_last_complete_run_of_the_fingerprint_in_the_history(tmp_path: Path) -> None:
    from commbench.history.recorder import RunInfo, RunRecorder, now
    from commbench.history.store import open_history
    from commbench.run.session import _last_run_prior

    cfg = SweepConfig(backend="gloo", ops=("all_gather",), sizes=(8, 64))
    op = OPS[0]()
    plan = SweepPlan(cfg, Grouping("world", 1, Machine()), [op])
    history = open_history(str(tmp_path / "h.sqlite"))
    info = RunInfo("run-a", "fp1", "sweep", "commbench sweep", "gloo", 1, ("h1",), "/tmp/a.csv", "0.1.0", {}, now())
    recorder = RunRecorder(history, info)
    common = {"op": op.name, "phase": op.phases[0], "dtype": "float32", "status": "ok", "run_id": "run-a"}
    for variant, size, p50 in (("v0", 8, 100.0), ("v1", 8, 300.0), ("v0", 64, 500.0)):
        recorder.add({**common, "variant": variant, "size_bytes": size, "time_us_p50": p50})
    recorder.end(completed=True)

    def sink(fingerprint: str) -> Any:
        return type("Sink", (), {"base": {"fingerprint": fingerprint}})()

    works = sorted({w for _, w in plan.cases()})
    prior = _last_run_prior(plan, history, sink("fp1"))
    assert prior == {(op.name, works[0]): pytest.approx(200e-6), (op.name, works[1]): pytest.approx(500e-6)}
    assert _last_run_prior(plan, history, sink("another")) == {}  # no run of it: asked without reading rows
    assert _last_run_prior(plan, None, None) == {}
    recorder.close()
