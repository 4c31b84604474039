"""broadcast: every rank's tensor becomes the root's (in place)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from commbench.lazy import torch
from commbench.ops.base import Call
from commbench.ops.cost import Cost, lg
from commbench.ops.memory import MemoryCase
from commbench.ops.rooted import ROOT, RootedOp
from commbench.ops.spec import INPUT, UNIT_FACTOR, OpSpec, Point, Recorded, elements_for
from commbench.ops.values import chunk_temporaries, contribution

if TYPE_CHECKING:
    from commbench.ops.args import CollArgs


class Broadcast(RootedOp):
    """One in-place broadcast of `count` elements from --root (nccl-tests' broadcast_perf)."""

    spec = OpSpec(
        name="broadcast",
        summary="the root's tensor is copied to every rank, in place (--root)",
        s_definition="S = count x element size",
        bus_factor=UNIT_FACTOR,
        variants=("flat",),
        recorded=Recorded({"broadcast": "flat"}, INPUT),
        options=(ROOT,),
        cost=Cost(
            ring=lambda p: (lg(p) + p - 1, 2 * (p - 1) / p),  # scatter + all_gather
            tree=lambda p: (lg(p), lg(p)),  # binomial tree
        ),
    )
    collective = "broadcast"

    def memory_bytes(self, case: MemoryCase, point: Point) -> int:
        return point.size_bytes + case.transport("broadcast", point.size_bytes) + chunk_temporaries(point.size_bytes)

    def setup(self, args: CollArgs, point: Point) -> None:
        args.count = elements_for(point.size_bytes, args.element_size, 1)
        args.input = torch.empty(args.count, dtype=args.dtype, device=args.device)

    def fill(self, args: CollArgs) -> None:
        # Zeros on the other ranks: the values (1..11) can only arrive by the broadcast.
        if args.rank == self.root:
            contribution(self.root).write(args.input)
        else:
            args.input.zero_()

    def calls(self, args: CollArgs, phase: str) -> list[Call]:
        return [Call(args.backend.broadcast, (args.input, self.root))]

    def wrong(self, args: CollArgs, phase: str) -> int:
        return contribution(self.root).wrong(args.input)  # the root's own tensor must be untouched too
