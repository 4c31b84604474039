"""scatter: chunk r of the root's buffer lands in rank r's output."""

from __future__ import annotations

from typing import TYPE_CHECKING

from commbench.lazy import torch
from commbench.ops.base import Call
from commbench.ops.cost import Cost, lg
from commbench.ops.memory import MemoryCase
from commbench.ops.rooted import ROOT, RootedOp
from commbench.ops.spec import GATHER_FACTOR, OpSpec, Point, Recorded, elements_for
from commbench.ops.values import chunk_temporaries, contribution, gathered_wrong

if TYPE_CHECKING:
    from commbench.ops.args import CollArgs


class Scatter(RootedOp):
    """n views of one flat buffer on --root, one to each rank (nccl-tests' scatter_perf)."""

    spec = OpSpec(
        name="scatter",
        summary="the root sends chunk r of its count elements to rank r (--root)",
        s_definition="S = scattered bytes at the root = per-rank count x element size x n",
        bus_factor=GATHER_FACTOR,
        variants=("flat",),
        recorded=Recorded({"scatter": "flat"}, lambda inp, out, n: out * n, same_counts=False),
        options=(ROOT,),
        cost=Cost(
            tree=lambda p: (lg(p), (p - 1) / p),  # binomial
        ),
    )
    collective = "scatter"

    def memory_bytes(self, case: MemoryCase, point: Point) -> int:
        # The root's: the buffer it scatters (S) and its own chunk (S/n).
        s = point.size_bytes
        return s + s // case.world_size + case.transport("scatter", s) + chunk_temporaries(s)

    def setup(self, args: CollArgs, point: Point) -> None:
        n = args.world_size
        args.count = elements_for(point.size_bytes, args.element_size, n)
        args.output = torch.empty(args.count // n, dtype=args.dtype, device=args.device)
        args.input = None  # the other ranks pass no input list
        if args.rank == self.root:
            args.input = list(torch.empty(args.count, dtype=args.dtype, device=args.device).chunk(n))

    def fill(self, args: CollArgs) -> None:
        for r, dst in enumerate(args.input or []):  # chunk r: rank r's values
            contribution(r).write(dst)
        args.output.zero_()

    def calls(self, args: CollArgs, phase: str) -> list[Call]:
        return [Call(args.backend.scatter, (args.output, args.input, self.root))]

    def wrong(self, args: CollArgs, phase: str) -> int:
        # Every rank's chunk; and the root's buffer, which the API only reads.
        sent = 0 if args.input is None else gathered_wrong(args.input)
        return contribution(args.rank).wrong(args.output) + sent
