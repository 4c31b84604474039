"""all_reduce: every rank ends with the sum over ranks of every rank's tensor (in place)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from commbench.lazy import torch
from commbench.ops.base import Call, CallsOp
from commbench.ops.cost import Cost, lg
from commbench.ops.memory import MemoryCase
from commbench.ops.spec import INPUT, REDUCE_FACTOR, OpSpec, Point, Recorded, elements_for
from commbench.ops.values import chunk_temporaries, contribution, summed

if TYPE_CHECKING:
    from commbench.ops.args import CollArgs


class AllReduce(CallsOp):
    """One in-place sum of `count` elements (nccl-tests' all_reduce_perf, in place)."""

    spec = OpSpec(
        name="all_reduce",
        summary="sum in place over ranks",
        s_definition="S = count x element size",
        bus_factor=REDUCE_FACTOR,
        variants=("flat",),
        recorded=Recorded(
            {"allreduce": "flat", "all_reduce": "flat", "allreduce_coalesced": "flat"}, INPUT, reduces=True
        ),
        cost=Cost(
            ring=lambda p: (2 * (p - 1), 2 * (p - 1) / p),
            tree=lambda p: (2 * lg(p), 2 * (p - 1) / p),  # Rabenseifner
        ),
    )

    def memory_bytes(self, case: MemoryCase, point: Point) -> int:
        # The one buffer (S): refilled from the value formula, not from a saved copy of the input.
        s = point.size_bytes
        return s + case.transport("all_reduce", s) + chunk_temporaries(s)

    def setup(self, args: CollArgs, point: Point) -> None:
        args.count = elements_for(point.size_bytes, args.element_size, 1)
        args.input = torch.empty(args.count, dtype=args.dtype, device=args.device)

    def fill(self, args: CollArgs) -> None:
        contribution(args.rank).write(args.input)

    def before(self, args: CollArgs, phase: str) -> None:
        # In place, every iteration multiplies the values by about n: refill (untimed) so half types
        # never reach inf and every sample moves the same numbers.
        self.fill(args)

    def calls(self, args: CollArgs, phase: str) -> list[Call]:
        return [Call(args.backend.all_reduce, (args.input,))]

    def wrong(self, args: CollArgs, phase: str) -> int:
        return summed([contribution(r) for r in range(args.world_size)]).wrong(args.input)
