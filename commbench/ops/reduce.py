"""reduce: the sum over ranks lands in the root's tensor (in place)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from commbench.lazy import torch
from commbench.ops.base import Call
from commbench.ops.cost import Cost, lg
from commbench.ops.memory import MemoryCase
from commbench.ops.rooted import ROOT, RootedOp
from commbench.ops.spec import INPUT, UNIT_FACTOR, OpSpec, Point, Recorded, elements_for
from commbench.ops.values import chunk_temporaries, contribution, summed

if TYPE_CHECKING:
    from commbench.ops.args import CollArgs


class Reduce(RootedOp):
    """One in-place sum of `count` elements into --root (nccl-tests' reduce_perf)."""

    spec = OpSpec(
        name="reduce",
        summary="sum over ranks into the root's tensor, in place (--root)",
        s_definition="S = count x element size",
        bus_factor=UNIT_FACTOR,
        variants=("flat",),
        recorded=Recorded({"reduce": "flat"}, INPUT, reduces=True),
        options=(ROOT,),
        cost=Cost(
            tree=lambda p: (lg(p), lg(p)),  # binomial tree
        ),
    )
    collective = "reduce"

    def memory_bytes(self, case: MemoryCase, point: Point) -> int:
        # The one buffer (S), refilled from the value formula before each sample.
        return point.size_bytes + case.transport("reduce", point.size_bytes) + chunk_temporaries(point.size_bytes)

    def setup(self, args: CollArgs, point: Point) -> None:
        args.count = elements_for(point.size_bytes, args.element_size, 1)
        args.input = torch.empty(args.count, dtype=args.dtype, device=args.device)

    def fill(self, args: CollArgs) -> None:
        contribution(args.rank).write(args.input)

    def before(self, args: CollArgs, phase: str) -> None:
        # In place, the root's values grow about n-fold per iteration: refill (untimed), as all_reduce does.
        self.fill(args)

    def calls(self, args: CollArgs, phase: str) -> list[Call]:
        return [Call(args.backend.reduce, (args.input, self.root))]

    def wrong(self, args: CollArgs, phase: str) -> int:
        if args.rank != self.root and not args.backend.reduce_keeps_non_root:
            return 0  # this transport uses the other ranks' tensors as scratch (the row's note says so)
        if args.rank == self.root:
            return summed([contribution(r) for r in range(args.world_size)]).wrong(args.input)
        return contribution(args.rank).wrong(args.input)  # the API reads the other ranks' tensors only

    def note(self, args: CollArgs) -> str:
        notes = [super().note(args)]
        if not args.backend.reduce_keeps_non_root and args.world_size > 1:
            notes.append(
                f"only the root's result is checked: {args.backend.name}'s reduce uses the other ranks' tensors as scratch"
            )
        return "; ".join(n for n in notes if n)
