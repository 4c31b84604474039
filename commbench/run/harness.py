"""The runColl harness (PARAM comms' pattern): a holder of a collective's arguments, a completion
step that waits on every outstanding wait object, and the timed loop with its correctness check.

The harness never names an op: everything op-specific goes through the Op contract.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from commbench.backends.base import Backend, Work
from commbench.run.timers import PERF_COUNTER, timer_for

if TYPE_CHECKING:
    from commbench.ops.base import Op
    from commbench.run.watchdog import Watchdog


@dataclass
class CollArgs:
    """Everything one collective call needs, plus the list of outstanding wait objects."""

    backend: Backend
    dtype: torch.dtype
    variant: str
    async_op: bool = True
    wait_objs: list[Work] = field(default_factory=list)
    count: int = 0
    input: Any = None
    output: Any = None
    expected: Any = None
    state: Any = None  # op-private (a bucketer, a module, ...)

    @property
    def rank(self) -> int:
        return self.backend.rank

    @property
    def world_size(self) -> int:
        return self.backend.world_size

    @property
    def device(self) -> torch.device:
        return self.backend.device

    @property
    def element_size(self) -> int:
        return torch.empty((), dtype=self.dtype).element_size()

    def issue(self, work: Work) -> None:
        """Keep an async op's wait object for complete(); wait at once otherwise."""
        if self.async_op:
            self.wait_objs.append(work)
        else:
            work.wait()


def wait_all(args: CollArgs) -> None:
    """Wait on every outstanding wait object (on CUDA, the current stream then waits for them)."""
    for work in args.wait_objs:
        work.wait()
    args.wait_objs.clear()


def complete(args: CollArgs) -> None:
    """Wait on every outstanding wait object, then let the device drain."""
    wait_all(args)
    args.backend.synchronize()


@dataclass
class Measurement:
    """One (variant, phase, size) measured on every rank."""

    samples_us: list[float]  # per iteration, the max over ranks
    per_rank_us: list[list[float]]
    wrong: int  # summed over ranks; -1 when the check was skipped
    calls: float  # collective calls per op iteration
    apis: str  # the API names those calls used
    timer: str = PERF_COUNTER  # how the samples were timed (commbench/run/timers.py)


def _step(op: Op, args: CollArgs, phase: str, window: int) -> None:
    for _ in range(window):
        op.issue(args, phase)
    complete(args)


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
) -> Measurement:
    """Warm up, time `iters` samples of `window` back-to-back ops each, then check one fresh iteration.

    Blocking mode is window=1: barrier (untimed), start, issue, wait, stop. Non-blocking mode issues
    `window` ops before completing them all and reports time / window. The timer (timer_for) reads
    every sample once the block is done.
    """
    backend = args.backend
    timer = timer_for(backend)
    op.fill(args)
    for _ in range(warmup):
        op.before(args, phase)
        watchdog.arm(f"{label} (warm-up)")
        _step(op, args, phase, 1)

    # Only the timed steps' calls count: before() may communicate too (sync_bn's untimed forward
    # ahead of a timed backward), and those calls are not the phase's.
    timed_calls: Counter[str] = Counter()
    for _ in range(iters):
        op.before(args, phase)
        watchdog.arm(label)
        backend.synchronize()  # untimed: the barrier then lines up ranks whose devices are idle
        backend.barrier()
        backend.calls.clear()
        timer.start()
        for _ in range(window):
            op.issue(args, phase)
        wait_all(args)
        timer.stop()
        timed_calls.update(backend.calls)
    local_us = [us / window for us in timer.read_us()]  # on CUDA, waits for the block's last event
    calls = sum(timed_calls.values()) / (iters * window)
    apis = "+".join(sorted(timed_calls))

    wrong = -1
    if check:
        op.fill(args)
        op.before(args, phase)
        watchdog.arm(f"{label} (check)")
        _step(op, args, phase, 1)
        wrong = op.wrong(args, phase)

    watchdog.arm(f"{label} (gathering results)")
    gathered = backend.all_gather_object((local_us, wrong))
    watchdog.disarm()
    per_rank = [g[0] for g in gathered]
    samples = [max(column) for column in zip(*per_rank)]
    total_wrong = sum(g[1] for g in gathered) if check else -1
    return Measurement(samples, per_rank, total_wrong, calls, apis, timer.name)
