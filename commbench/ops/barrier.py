"""barrier: latency only. S = 0, so the row's algbw and busbw are empty; one point per sweep.

The measured barrier is the transport's async one (a wait object, like every other op); the
harness's own untimed barrier before each sample is a separate call.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from commbench.ops.args import CollArgs, wait_all
from commbench.ops.base import Call, CallsOp
from commbench.ops.cost import Cost, lg
from commbench.ops.memory import MemoryCase
from commbench.ops.spec import OpSpec, Point, Recorded

if TYPE_CHECKING:
    from commbench.backends.base import Backend

# The check holds the last rank back this long before it enters; a rank that leaves the barrier
# in under half of it did not wait for that rank. Long enough to dwarf scheduling noise after the
# aligning barrier, short enough to cost nothing once per dtype.
CHECK_DELAY_S = 0.1


class Barrier(CallsOp):
    """No rank leaves before every rank has entered; timed as one op per sample."""

    spec = OpSpec(
        name="barrier",
        summary="every rank waits until all have arrived; latency only, measured once (not per size)",
        s_definition="S = 0",
        bus_factor=None,
        variants=("barrier",),
        recorded=Recorded({"barrier": "barrier"}, lambda inp, out, n: 0),
        workload_knobs="nothing (the barrier moves no data)",
        cost=Cost(
            tree=lambda p: (lg(p), 0.0),  # dissemination
        ),
    )

    def unavailable(self, variant: str, backend: Backend) -> str | None:
        return backend.missing("barrier_async")

    def points(self, requested: Sequence[int]) -> list[Point]:
        return [Point("barrier", 0)]  # no size to sweep

    def memory_bytes(self, case: MemoryCase, point: Point) -> int:
        return 0

    def setup(self, args: CollArgs, point: Point) -> None:
        args.count = 0

    def fill(self, args: CollArgs) -> None:
        """Nothing to fill: a barrier carries no data."""

    def calls(self, args: CollArgs, phase: str) -> list[Call]:
        return [Call(args.backend.barrier_async, ())]

    def wrong(self, args: CollArgs, phase: str) -> int:
        """1 on a rank that left the barrier before the last rank entered it, else 0.

        After aligning the ranks with the harness's barrier, the last rank waits CHECK_DELAY_S
        before it issues this op's barrier; every other rank must then wait at least about that
        long. Only durations on each rank's own clock are compared, so hosts need no common clock.
        """
        late = args.world_size - 1
        args.backend.barrier()
        if args.rank == late:
            time.sleep(CHECK_DELAY_S)
        start = time.perf_counter()
        self.issue(args, phase)
        wait_all(args)
        waited = time.perf_counter() - start
        return int(args.rank != late and waited < CHECK_DELAY_S / 2)
