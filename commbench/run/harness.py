"""The runColl harness (PARAM comms' pattern): the timed loop with its correctness check, over the
arguments and the completion step the ops define (commbench/ops/args.py).

The harness never names an op: everything op-specific goes through the Op contract.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from commbench.backends.base import Backend
from commbench.ops.args import CollArgs, complete
from commbench.results.budget import Budget
from commbench.results.measurement import Measurement
from commbench.run.overlap import ComputeKernel
from commbench.run.phases import PhaseClock
from commbench.run.timers import Timer, timer_for

if TYPE_CHECKING:
    from commbench.ops.base import Op
    from commbench.run.watchdog import Watchdog

T = TypeVar("T")


def _step(op: Op, args: CollArgs, phase: str, window: int) -> None:
    for _ in range(window):
        op.issue(args, phase)
    complete(args)


def blocks(iters: int, rounds: int) -> list[int]:
    """Split `iters` samples into at most `rounds` blocks as equal as can be (the first ones longer)."""
    used = max(1, min(rounds, iters))
    return [iters // used + (1 if r < iters % used else 0) for r in range(used)]


class TimedCase:
    """A case's timed loop: one (variant, phase, size) measured in blocks, possibly with other
    cases' blocks in between.

    Every rank must issue the same collectives in the same order, so every decision taken here (how
    many warm-up iterations, how many timed ones) is taken from values exchanged between the ranks:
    the ranks reduce their samples to the per-iteration maximum over ranks, which all of them then
    hold: after each block, or, in a sweep's rotation, after each round for the blocks of every case
    of the round at once (share_blocks). The op never sees the clock. Each exchange costs a rank O(samples),
    whatever the world size (docs/scale.md); keep_per_rank (--raw) also gathers every rank's
    samples to rank 0, which alone needs them.
    """

    def __init__(
        self,
        op: Op,
        args: CollArgs,
        phase: str,
        *,
        window: int,
        watchdog: Watchdog,
        label: str,
        keep_per_rank: bool = False,
        compute_for: Callable[[TimedCase, float], ComputeKernel] | None = None,
        timer: Timer | None = None,
        phases: PhaseClock | None = None,
    ) -> None:
        self.op, self.args, self.phase, self.window = op, args, phase, window
        self.phases = PhaseClock() if phases is None else phases  # the sweep's, where the rotation passes it
        self.size_bytes = op.size_bytes(args, phase)  # S, as set up
        self.watchdog, self.label = watchdog, label
        self.keep_per_rank = keep_per_rank
        self.rounds_us: list[list[float]] = []  # agreed: max over ranks
        self.held: HeldBlock | None = None  # the block timed here and not yet shared (share_blocks)
        self.per_rank_us: list[list[float]] = []  # rank 0 with keep_per_rank: one list per rank
        self.timed_calls: Counter[str] = Counter()
        # The window's op iterations bound once (_prepare), and the API names their bound calls make
        # per sample, counted when bound (a bound call does not record as it runs).
        self._calls: list[Callable[[], None]] | None = None
        self._bound: Counter[str] = Counter()
        self._bound_per_sample = 0
        self.wrong = -1
        self._warm_wrong: int | None = None  # this rank's count from the first warm-up sample (warm_up)
        self.timer = timer_for(self.backend) if timer is None else timer  # another timer: bench/timers.py
        # --overlap (commbench/run/overlap.py): compute_for makes the matmul for this case from the
        # op's agreed sample time (seconds) once the first block has measured it.
        self.compute_for = compute_for
        self.compute: ComputeKernel | None = None
        self.compute_rounds_us: list[list[float]] = []
        self.overlapped_rounds_us: list[list[float]] = []

    @property
    def backend(self) -> Backend:
        return self.args.backend

    def _prepare(self) -> list[Callable[[], None]]:
        """The window's op iterations, bound once per case (Op.prepare): each is the transport's own
        calls with their arguments in place, so a sample issues them and does nothing else."""
        if self._calls is None:
            with self.backend.binding() as binding:
                self._calls = [self.op.prepare(self.args, self.phase) for _ in range(self.window)]
            self._bound = binding.calls
            self._bound_per_sample = sum(binding.calls.values())
        return self._calls

    def _timed(
        self,
        samples: int,
        label: str,
        counted: Counter[str] | None = None,
        with_op: bool = True,
        with_compute: bool = False,
        unbound: bool = False,
    ) -> None:
        """`samples` timed samples, each: untimed preparation and barrier, then start, the window's
        bound op iterations and their completion, stop. The timer holds the samples until read.
        --overlap also times the compute kernel alone (with_op False) and run between issuing the
        ops and completing them.

        Inside a sample: the timer's marks, the bound calls, their waits. The bound calls' count is
        fixed once bound, so the issued-call counter the heartbeat publishes advances once, for all
        of the samples, before them. An op that issues unbound (Op.calls() is None) records as it
        goes; what it records in a sample is added to `counted` after the stop. unbound: the
        window's iterations through op.issue() instead (the checked warm-up sample), which records
        its calls as it goes.
        """
        if unbound:
            calls = [functools.partial(self.op.issue, self.args, self.phase)] * self.window
        else:
            calls = self._prepare() if with_op else []
        if with_op and not unbound:
            self.backend.issued += self._bound_per_sample * samples
        op, args, phase, backend, timer = self.op, self.args, self.phase, self.backend, self.timer
        arm, waits, recorded = self.watchdog.arm, args.wait_objs, backend.calls
        compute = self.compute.run if with_compute and self.compute is not None else None
        for _ in range(samples):
            arm(label)
            if with_op:
                op.before(args, phase)
            backend.synchronize()  # untimed: the barrier then lines up ranks whose devices are idle
            recorded.clear()
            start, stop = timer.marks()
            backend.barrier()
            began = start()
            for call in calls:
                call()
            if compute is not None:
                compute()
            for work in waits:
                work.wait()
            waits.clear()
            timer.add(began, stop())
            if counted is not None and recorded:
                counted.update(recorded)

    def _sample(self, label: str, unbound: bool = False) -> float:
        """One sample in seconds, read at once: a warm-up sample's length decides the iteration count."""
        self._timed(1, label, unbound=unbound)
        return self.timer.read_us()[-1] * 1e-6

    def warm_up(self, budget: Budget, check: bool = False) -> float:
        """Fill the inputs and run the budget's warm-up; returns the seconds per sample it saw.
        check: count this rank's wrong elements in the first warm-up sample's result, the row's
        correctness check (_check_here then hands that count over instead of running its own).

        Fixed iterations (no time budget): exactly --warmup iterations; the estimate is this rank's
        own, good for a progress estimate only. Auto mode: warm-up runs at least once, since it times
        the case, and stops early once it has taken its share of the budget (Budget.warmup_samples);
        the ranks agree on that after the first iteration. The estimate is then the fastest warm-up
        sample after the first (a cold one): on a shared machine a few descheduled samples would
        otherwise leave a cheap case with --min-iters; it is agreed as the max over ranks, so a rank
        whose clock reads slower decides for every rank, and every rank runs the same count.
        """
        with self.phases.phase("fill"):
            self.op.fill(self.args)
        with self.phases.phase("warmup"):
            return self._warm_up(budget, check)

    def _warm_up(self, budget: Budget, check: bool) -> float:
        """The warm-up loop; with check, the first sample's result is checked before the second runs.

        That sample is the iteration the check has always run: it follows the fill, its untimed
        before() re-fills what an in-place op overwrote, and it issues through op.issue(), as the
        check's own iteration did (the other samples run the bound calls). A window of more than one
        would apply an in-place op several times before the check sees it: such a case keeps the
        check of its own (_check_here)."""
        auto = budget.auto
        planned = budget.warmup_samples(0.0)  # the most it may take, before any sample is seen
        local: list[float] = []
        first = math.nan
        checked = check and self.window == 1
        while len(local) < planned:
            local.append(self._sample(f"{self.label} (warm-up)", unbound=checked and not local))
            if checked and len(local) == 1:
                self._warm_wrong = self._count_wrong()
            if auto and len(local) == 1:
                first = self.agree_max(local[0])
                planned = budget.warmup_samples(first)
        self.watchdog.disarm()
        estimate = min(local[1:] or local) if local else math.nan
        if not auto or len(local) == 1:
            return first if auto else estimate
        return self.agree_max(estimate)

    def agree_max(self, value: float) -> float:
        """The largest of every rank's value, on every rank (one all_reduce of one float64)."""
        return self._share(lambda: self.backend.reduce_floats([value], "max")[0])

    def block(self, iters: int, round_index: int, check: bool = False, share: bool = True) -> None:
        """Time `iters` samples as part of round `round_index` (and, when asked, on the row's last
        block, count the check's wrong elements: _check_here), then share them, so that every rank
        holds the same per-iteration maxima over ranks. share False: the block is held until
        share_blocks shares it with other cases' (the rotation's one exchange per round)."""
        with self.phases.phase("timed"):
            self._timed_block(iters)
            # Read once the block is done: on CUDA one synchronise on the block's last event.
            local_us = [us / self.window for us in self.timer.read_us()]
            if self.compute_for is not None and self.compute is None and local_us:
                self.compute = self.compute_for(self, self.agree_max(statistics.median(local_us) * self.window * 1e-6))
            overlap = self._overlap_block(iters) if self.compute is not None else None
        wrong = self._check_here() if check else None
        self._share_block(local_us, round_index, overlap, wrong, share)

    def _share_block(
        self,
        local_us: list[float],
        round_index: int,
        overlap: tuple[list[float], list[float]] | None,
        wrong: int | None,
        share: bool = True,
    ) -> None:
        """Hold a block's samples (and --overlap's, and the check's count) until they are shared;
        share: at once, in an exchange of this case's alone (share_blocks)."""
        if self.held is not None:
            raise RuntimeError(f"{self.label}: a block was timed before the previous one was shared")
        self.held = HeldBlock(local_us, round_index, overlap, wrong)
        if share:
            share_blocks([self])
        else:
            self.watchdog.disarm()  # the block's collectives are done: nothing is waited on until the next

    def _timed_block(self, iters: int) -> None:
        """The block's samples, and the calls they made counted for the row: the bound calls' per
        sample times the samples, once, and whatever unbound calls recorded."""
        self._timed(iters, self.label, self.timed_calls)
        if iters:
            self.timed_calls.update({api: n * iters for api, n in self._bound.items()})

    def _overlap_block(self, iters: int) -> tuple[list[float], list[float]]:
        """As many samples of the compute kernel alone, and of the op with the kernel between its
        issue and its completion, as the block had of the op alone (per op, as the op's are)."""
        found = []
        for with_op in (False, True):
            self._timed(iters, f"{self.label} (overlap)", with_op=with_op, with_compute=True)
            found.append([us / self.window for us in self.timer.read_us()])
        return found[0], found[1]

    def check(self) -> None:
        """This rank's check (_check_here), its count summed over ranks (the last block ran unchecked)."""
        wrong = self._check_here()
        self.wrong = self._share(lambda: _count(self.backend.reduce_floats([wrong], "sum")[0]))

    def _check_here(self) -> int:
        """This rank's wrong elements: the first warm-up sample's, counted when the warm-up checked
        it; else those of one fresh iteration run now (re-filled inputs, one iteration)."""
        if self._warm_wrong is not None:
            return self._warm_wrong
        with self.phases.phase("fill"):
            self.op.fill(self.args)
        with self.phases.phase("check"):
            self.op.before(self.args, self.phase)
            self.watchdog.arm(f"{self.label} (check)")
            _step(self.op, self.args, self.phase, 1)
        return self._count_wrong()

    def _count_wrong(self) -> int:
        """This rank's wrong elements in the result of the iteration that just ran (its waits done)."""
        with self.phases.phase("check"):
            self.watchdog.arm(f"{self.label} (check)")
            self.backend.synchronize()  # as complete() does: the device has drained
            return self.op.wrong(self.args, self.phase)

    def _share(self, exchange: Callable[[], T], label: str | None = None) -> T:
        """An exchange between the ranks, under the watchdog (a peer that never joins it is a hang)."""
        with self.phases.phase("control"):
            self.watchdog.arm(f"{label or self.label} (gathering results)")
            result = exchange()
            self.watchdog.disarm()
            return result

    def keep_held(self) -> bool:
        """On a stop, where the ranks can no longer share it: the held block's samples become its
        round's as this rank measured them (not the maxima over ranks). True when there was one."""
        if self.held is None:
            return False
        for rounds, part in zip(self.sample_rounds, self.held.parts()):
            extend_round(rounds, self.held.round_index, part)
        self.held = None
        return True

    @property
    def sample_rounds(self) -> list[list[list[float]]]:
        """The per-round sample lists a block extends, in HeldBlock.parts()' order."""
        return [self.rounds_us, self.compute_rounds_us, self.overlapped_rounds_us]

    @property
    def samples_us(self) -> list[float]:
        return [t for block in self.rounds_us for t in block]

    @property
    def iters(self) -> int:
        return sum(len(r) for r in self.rounds_us)

    def measurement(self) -> Measurement:
        """The case's record, as the sink writes it (the runner adds its notes)."""
        iters = max(self.iters, 1)
        calls = sum(self.timed_calls.values()) / (iters * self.window)
        apis = "+".join(sorted(self.timed_calls))
        return Measurement(
            op=self.op.name,
            variant=self.args.variant,
            phase=self.phase,
            dtype=str(self.args.dtype).removeprefix("torch."),
            size_bytes=self.size_bytes,
            count=self.args.count,
            bus_factor=self.op.bus_factor(self.backend.world_size),
            rounds_us=self.rounds_us,
            per_rank_us=self.per_rank_us,
            wrong=self.wrong,
            calls=calls,
            apis=apis,
            window=self.window,
            timer=self.timer.name,
            compute_rounds_us=self.compute_rounds_us,
            overlapped_rounds_us=self.overlapped_rounds_us,
            compute_flops=self.compute.flops if self.compute is not None else None,
        )


@dataclass
class HeldBlock:
    """A block timed on this rank whose values the ranks have not yet reduced (share_blocks)."""

    local_us: list[float]
    round_index: int
    overlap: tuple[list[float], list[float]] | None  # --overlap's compute and overlapped samples
    wrong: int | None  # this rank's wrong elements, on the row's last block

    def parts(self) -> list[list[float]]:
        """The sample lists, in the order of TimedCase's rounds_us, compute_ and overlapped_rounds_us."""
        return [self.local_us, *(self.overlap or ())]

    def values(self) -> list[float]:
        """What this block puts into the reduction: its samples, then its wrong count."""
        counted = [] if self.wrong is None else [float(self.wrong)]
        return [t for part in self.parts() for t in part] + counted


def share_blocks(cases: Sequence[TimedCase]) -> None:
    """Reduce the blocks these cases hold (HeldBlock) to their per-iteration maxima over ranks, in
    one all_reduce(MAX) for all of them; gather the per-rank samples to rank 0 only for cases that
    keep them. Every rank passes the same cases in the same order, each holding a block of the same
    length on every rank. A max picks one rank's float64, exactly, so the maxima are what an
    exchange per block gives, bit for bit.

    A check's wrong count rides along as one value more. Counts are never negative, so a largest
    count of 0 is also their sum: only a row in which some rank found a wrong element sums the counts,
    in one all_reduce(SUM) of those rows' counts that every rank joins, since every rank holds the
    same maxima. No rank's position in it: the ops may run in groups while this reduction spans the
    world."""
    held = [(case, case.held) for case in cases if case.held is not None]
    if not held:
        return
    lead = held[0][0]
    more = f" and {len(held) - 1} other cases" if len(held) > 1 else ""
    lead._share(lambda: _reduce_held(held), f"{lead.label}{more}")


def _reduce_held(held: list[tuple[TimedCase, HeldBlock]]) -> None:
    backend = held[0][0].backend
    maxima = backend.reduce_floats([t for _, block in held for t in block.values()], "max")
    start, wrong_somewhere = 0, []
    for case, block in held:
        for rounds, part in zip(case.sample_rounds, block.parts()):
            extend_round(rounds, block.round_index, maxima[start : start + len(part)])
            start += len(part)
        if block.wrong is not None:
            if maxima[start] == 0:
                case.wrong = 0
            else:
                wrong_somewhere.append((case, block.wrong))
            start += 1
    if wrong_somewhere:
        sums = backend.reduce_floats([float(wrong) for _, wrong in wrong_somewhere], "sum")
        for (case, _), total in zip(wrong_somewhere, sums):
            case.wrong = _count(total)
    keeping = [(case, block) for case, block in held if case.keep_per_rank]
    if keeping:
        gathered = backend.gather_floats([t for _, block in keeping for t in block.local_us])
        if gathered is not None:  # rank 0
            start = 0
            for case, block in keeping:
                case.per_rank_us += [[] for _ in range(len(gathered) - len(case.per_rank_us))]
                for mine, samples in zip(case.per_rank_us, gathered):
                    mine.extend(samples[start : start + len(block.local_us)])
                start += len(block.local_us)
    for case, _ in held:
        case.held = None


def extend_round(rounds: list[list[float]], round_index: int, maxima: list[float]) -> None:
    """Add a block's per-iteration maxima over ranks to round `round_index`."""
    if len(rounds) <= round_index:
        rounds.append([])
    rounds[round_index].extend(maxima)


def _count(total: float) -> int:
    """A count summed as float64 (exact below 2**53) back as the int it is."""
    return int(total)


def measure(
    op: Op,
    args: CollArgs,
    phase: str,
    *,
    iters: int,
    warmup: int,
    window: int,
    check: bool,
    watchdog: Watchdog,
    label: str,
    keep_per_rank: bool = False,
    timer: Timer | None = None,
) -> Measurement:
    """One case on its own: warm up, time `iters` samples of `window` back-to-back ops each in one
    block; check (when asked) the first warm-up sample, or with window > 1 or no warm-up one fresh
    iteration after the block.

    Blocking mode is window=1: barrier (untimed), start, issue, wait, stop. Non-blocking mode issues
    `window` ops before completing them all and reports time / window. The timer (timer_for) reads
    every sample once the block is done. keep_per_rank: rank 0 also keeps every rank's samples.
    """
    case = TimedCase(
        op, args, phase, window=window, watchdog=watchdog, label=label, keep_per_rank=keep_per_rank, timer=timer
    )
    case.warm_up(Budget(iters=iters, warmup=warmup), check)
    case.block(iters, 0, check)
    return case.measurement()
