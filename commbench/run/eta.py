"""How far a sweep has come and how long the rest will take.

The total is fixed before the first case: every (variant, phase, workload) the sweep plans, those the
transport may refuse included. A case that turns out to repeat another (two requested sizes rounded
to one S) or that the transport refuses counts as done when that is found, so the total never
changes under the reader's eyes and the count reaches it at the end.

The ETA is the predicted cost of what is left, times the wall time the sweep has taken per unit of
predicted cost at that size. A case's cost is its samples, warm-up and check included, each costing
its time plus one untimed barrier (taken as the cheapest sample seen: a barrier costs about what the
smallest collective does). So both a cheap case, whose barriers dominate, and a slow one, whose
samples do, weigh what they take; and a case counts as done round by round, as its blocks run.
What the cost leaves out (filling and checking large buffers, allocating them, exchanging samples)
grows with the size too: the wall time of every visit is kept with its size, and work left at a size
is scaled by what visits of similar sizes (within 4x) took per unit of cost, or by the whole run's
rate where none has been seen yet.

A case not timed yet is predicted from the same op's timed sizes (interpolated on log scales, or
beyond the largest along the line through the two largest: latency plus a cost per byte); for an op
not timed yet, from the last run of the same fingerprint in the results history (its p50 for the
same op, variant, phase, dtype and size), scaled by how this run's timed cases of similar sizes
compare with that run's (a machine busier today is busier for every op, and more so at
latency-bound sizes); without a history, from the median of the other ops' predictions at that
size, else its time budget. The history is what makes the ETA hold in a mix of ops: an op not
reached yet can cost 8x what the ops before it did. A case's size here is its work: its memory estimate
(Op.memory_bytes, SweepPlan.work), which every op has before anything is allocated and which grows
with the work: bytes for the collectives, C for sync_bn.
"""

from __future__ import annotations

import bisect
import math
import statistics
import time
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

from commbench.console.display import Status
from commbench.results.budget import Budget


@dataclass
class _Running:
    """A case that has been timed and planned: its samples still to run and its time per sample."""

    left: int
    sample_s: float
    work: int


@dataclass
class _Visit:
    """One visit of a case (what ran between two progress reports): its work, wall time and samples."""

    work: int
    wall_s: float = 0.0
    samples: int = 0
    timed_s: float = 0.0


# The estimate is worked out at most this often (seconds of the progress clock); between two, the
# last one stands, less the time since: a case takes milliseconds, and working out the estimate
# before each one took more of a default sweep than its smallest collectives did.
ESTIMATE_EVERY_S = 0.25
# Visits of works within this factor of a work tell what a unit of cost at that work takes in wall time.
SIMILAR_WORK = 4.0
# ... once this many of them have been seen; before, the whole run's rate stands in.
SIMILAR_VISITS = 3
# The prior's drift is taken over at least this many timed cases, the nearest in size.
DRIFT_CASES = 8


class SweepProgress:
    """Cases done of the total, and the ETA; fed by the runner on rank 0.

    planned: (op, work) of every case, in any order. prior: seconds per sample of (op, work) as the
    last comparable run measured them (empty without a history). The runner reports each case's timing
    after its warm-up, each block it runs and its end; the clock is injectable so tests can drive it.
    """

    def __init__(
        self,
        planned: Sequence[tuple[str, int]],
        budget: Budget,
        clock: Callable[[], float] = time.monotonic,
        prior: Mapping[tuple[str, int], float] | None = None,
    ) -> None:
        self.total = len(planned)
        self.done = 0
        self.budget = budget
        self.clock = clock
        self.start = clock()
        self.pending: Counter[tuple[str, int]] = Counter(planned)  # not timed yet
        self.running: dict[Hashable, _Running] = {}
        self.timed: dict[str, dict[int, list[float]]] = {}  # op -> work -> planned sample times
        self.done_samples = 0  # samples run, warm-up and checks included
        self.done_timed_s = 0.0  # their expected time
        self.barrier_s = math.inf
        self.visits: list[_Visit] = []  # closed visits
        self._visit: _Visit | None = None  # the one in progress since the last report
        self._visit_start = self.start
        self.prior = {key: t for key, t in (prior or {}).items() if math.isfinite(t) and t > 0}
        self.drifts: list[tuple[int, float]] = []  # (work, this run / the prior) of each timed case the prior has
        self._drift_at: dict[int, float] = {}  # _drift by work, until the next such case is timed
        # _curve by op and _per_work, until the next case is timed: an estimate predicts every pending
        # case from them, and rebuilding them per case made the ETA cost more than the sweep's samples.
        self._curves: dict[str, tuple[list[int], list[float]]] = {}
        self._per_work_memo: float | None = None
        self.estimate_every_s = ESTIMATE_EVERY_S
        self._estimated: tuple[float, float, float | None] | None = None  # (when, fraction, ETA)

    # -- what the runner reports ------------------------------------------------------------------

    def skip(self, op: str, work: int, case: Hashable | None = None) -> None:
        """A planned case that will not run (further): it repeats another, or the transport refused it
        (`case`: its id, when it may have been planned already)."""
        if self.running.pop(case, None) is None:
            self.pending[(op, work)] -= 1
        self.done += 1

    def warmed_up(self, case: Hashable, op: str, work: int, iters: int, sample_s: float) -> None:
        """A case was warmed up and timed: `iters` samples of about `sample_s` seconds each."""
        self.pending[(op, work)] -= 1
        if math.isfinite(sample_s) and sample_s > 0:
            self.timed.setdefault(op, {}).setdefault(work, []).append(sample_s)
            self._curves.pop(op, None)
            self._per_work_memo = None
            self.barrier_s = min(self.barrier_s, sample_s)
            if (op, work) in self.prior:
                self.drifts.append((work, sample_s / self.prior[(op, work)]))
                self._drift_at.clear()
        else:
            sample_s = self._predict(op, work) or 0.0
        self.running[case] = _Running(iters, sample_s, work)
        self._count(self.budget.warmup_samples(sample_s), sample_s, work)

    def ran(self, case: Hashable, samples: int) -> None:
        """A block of the case ran."""
        running = self.running[case]
        running.left -= samples
        self._count(samples, running.sample_s, running.work)

    def finish(self, case: Hashable) -> None:
        """The case is done (its last block and check ran, or --precision stopped it early)."""
        running = self.running.pop(case, None)
        if running is not None:
            self._count(1, running.sample_s, running.work)  # the check's iteration
        self.done += 1

    def _count(self, samples: int, sample_s: float, work: int) -> None:
        self.done_samples += samples
        self.done_timed_s += samples * sample_s
        if self._visit is None:
            self._visit = _Visit(work)
        self._visit.samples += samples
        self._visit.timed_s += samples * sample_s

    def _close_visit(self) -> None:
        """The work reported since the last report was one visit: keep its wall time."""
        now = self.clock()
        if self._visit is not None:
            self._visit.wall_s = now - self._visit_start
            self.visits.append(self._visit)
        self._visit, self._visit_start = None, now

    # -- the estimate -------------------------------------------------------------------------------

    def _barrier(self) -> float:
        return self.barrier_s if math.isfinite(self.barrier_s) else 0.0

    def _cost(self, samples: float, sample_s: float) -> float:
        return samples * (sample_s + self._barrier())

    def _predict(self, op: str, work: int) -> float | None:
        """Expected seconds per sample of a case not timed yet; None when nothing is known."""
        own = self._predict_in(op, work)
        if own is not None:  # the op's own timed works: fresher than any earlier run
            return own
        before = self.prior.get((op, work))
        if before is not None:
            return before * self._drift(work)
        others = [t for name in self.timed if (t := self._predict_in(name, work)) is not None]
        return statistics.median(others) if others else None

    def _drift(self, work: int) -> float:
        """How this run's timed cases compare with the prior's at about this work: the median ratio
        over the timed cases within SIMILAR_WORK of it, and at least the DRIFT_CASES nearest (1
        before any). By work, because a busy machine slows a latency-bound case more than a
        bandwidth-bound one; over several cases, because one is a warm-up sample or two."""
        if not self.drifts:
            return 1.0
        if work not in self._drift_at:
            ratios = sorted((abs(math.log(max(timed, 1) / max(work, 1))), ratio) for timed, ratio in self.drifts)
            near = [ratio for distance, ratio in ratios if distance <= math.log(SIMILAR_WORK)]
            chosen = near if len(near) >= DRIFT_CASES else [r for _, r in ratios[:DRIFT_CASES]]
            self._drift_at[work] = statistics.median(chosen)
        return self._drift_at[work]

    def _curve(self, op: str) -> tuple[list[int], list[float]]:
        """The op's timed works, ascending, and the median planned sample time at each."""
        if op not in self._curves:
            by_work = self.timed.get(op, {})
            works = sorted(by_work)
            self._curves[op] = works, [statistics.median(by_work[s]) for s in works]
        return self._curves[op]

    def _predict_in(self, op: str, work: int) -> float | None:
        works, times = self._curve(op)
        if not works:
            return None
        if work <= works[0]:
            return times[0]
        if work >= works[-1]:
            slope = _slope(works, times)
            return times[-1] + (self._per_work() if slope is None else slope) * (work - works[-1])
        i = bisect.bisect_left(works, work)
        (s0, t0), (s1, t1) = (works[i - 1], times[i - 1]), (works[i], times[i])
        if s0 <= 0 or t0 <= 0 or t1 <= 0:
            return t0 + (t1 - t0) * (work - s0) / (s1 - s0)
        share = math.log(work / s0) / math.log(s1 / s0)
        return math.exp(math.log(t0) + share * math.log(t1 / t0))

    def _per_work(self) -> float:
        """For an op whose works have not yet reached the bandwidth: the median time per unit of work
        of the ops that have (0 when none has: latency is all that is known)."""
        if self._per_work_memo is None:
            slopes = [slope for op in self.timed if (slope := _slope(*self._curve(op))) is not None]
            self._per_work_memo = statistics.median(slopes) if slopes else 0.0
        return self._per_work_memo

    def _rate(self, work: int, overall: float, visits: _Visits) -> float:
        """Wall seconds per unit of cost at this work: from the visits of similar works, else overall."""
        count, wall_s, timed_s, samples = visits.within(work / SIMILAR_WORK, work * SIMILAR_WORK)
        cost = timed_s + samples * self._barrier()
        if count < SIMILAR_VISITS or cost <= 0:
            return overall
        return wall_s / cost

    def _left_s(self, overall: float) -> float | None:
        """Predicted wall seconds of the work still to run; None when a case cannot be predicted yet."""
        rates: dict[int, float] = {}
        visits = _Visits(self.visits)

        def wall(cost: float, work: int) -> float:
            if work not in rates:
                rates[work] = self._rate(work, overall, visits)
            return cost * rates[work]

        left = sum(wall(self._cost(r.left + 1, r.sample_s), r.work) for r in self.running.values())
        for (op, work), count in self.pending.items():
            if count <= 0:
                continue
            sample_s = self._predict(op, work)
            if sample_s is None:
                if not self.budget.auto:
                    return None
                sample_s = self.budget.time_per_size / self.budget.min_iters  # the budget, at the floor
            samples = self.budget.samples(sample_s) + self.budget.warmup_samples(sample_s) + 1
            left += wall(count * self._cost(samples, sample_s), work)
        return left

    def _done(self) -> float:
        return self.done_timed_s + self.done_samples * self._barrier()

    def eta_s(self) -> float | None:
        """Seconds left: the predicted cost left at the rate the sweep has gone so far."""
        return self._estimate()[1]

    def _estimate(self) -> tuple[float, float | None]:
        """(the share of the time done, the ETA in seconds or None)."""
        done, elapsed = self._done(), self.clock() - self.start
        left = self._left_s(elapsed / done) if done > 0 else None
        if left is None:
            return self.done / max(self.total, 1), None
        return elapsed / (elapsed + left) if elapsed + left > 0 else 1.0, left

    def status(self, label: str) -> Status:
        """Where the sweep stands; called before each visit, so it also closes the previous one."""
        self._close_visit()
        now = self.clock()
        if self._estimated is None or now - self._estimated[0] >= self.estimate_every_s:
            self._estimated = (now, *self._estimate())
        when, fraction, eta = self._estimated
        eta = None if eta is None else max(eta - (now - when), 0.0)
        return Status(self.done, self.total, fraction, eta, label)


class _Visits:
    """The closed visits sorted by work, with running sums, so that the visits within a range of
    works are summed in two bisections rather than one pass over every visit."""

    def __init__(self, visits: Sequence[_Visit]) -> None:
        ordered = sorted(visits, key=lambda v: v.work)
        self.works = [v.work for v in ordered]
        self.sums = [(0.0, 0.0, 0)]  # (wall_s, timed_s, samples) of the first i visits
        for v in ordered:
            wall_s, timed_s, samples = self.sums[-1]
            self.sums.append((wall_s + v.wall_s, timed_s + v.timed_s, samples + v.samples))

    def within(self, low: float, high: float) -> tuple[int, float, float, int]:
        """(visits, wall seconds, timed seconds, samples) of the visits with low <= work <= high."""
        i, j = bisect.bisect_left(self.works, low), bisect.bisect_right(self.works, high)
        (w0, t0, s0), (w1, t1, s1) = self.sums[i], self.sums[j]
        return j - i, w1 - w0, t1 - t0, s1 - s0


# The time per unit of work counts once the largest work takes this much longer than the smallest:
# below it, the difference is the noise of a latency-bound op, and dividing it by a few bytes would
# predict seconds for a large work.
BANDWIDTH_VISIBLE = 1.5


def _slope(works: Sequence[int], times: Sequence[float]) -> float | None:
    """Time per unit of work past the latency, from the smallest and the largest work (exact for a
    latency + work / bandwidth cost, and robust to the noise in between); None while latency-bound."""
    if len(works) < 2 or not times[-1] >= BANDWIDTH_VISIBLE * times[0] or works[-1] <= works[0]:
        return None
    return (times[-1] - times[0]) / (works[-1] - works[0])
