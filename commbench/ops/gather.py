"""gather: rank r's k elements land at [r*k, (r+1)*k) of the root's output."""

from __future__ import annotations

from typing import TYPE_CHECKING

from commbench.lazy import torch
from commbench.ops.base import Call
from commbench.ops.cost import Cost, lg
from commbench.ops.memory import MemoryCase
from commbench.ops.rooted import ROOT, RootedOp
from commbench.ops.spec import GATHER_FACTOR, GATHERED, OpSpec, Point, Recorded, elements_for
from commbench.ops.values import chunk_temporaries, contribution, gathered_wrong

if TYPE_CHECKING:
    from commbench.ops.args import CollArgs


class Gather(RootedOp):
    """Every rank's count/n elements into a list of n views of one flat buffer on --root (nccl-tests' gather_perf)."""

    spec = OpSpec(
        name="gather",
        summary="every rank contributes count/n elements; the root receives all of them (--root)",
        s_definition="S = gathered bytes at the root = per-rank count x element size x n",
        bus_factor=GATHER_FACTOR,
        variants=("flat",),
        recorded=Recorded({"gather": "flat"}, GATHERED, same_counts=False),
        options=(ROOT,),
        cost=Cost(
            tree=lambda p: (lg(p), (p - 1) / p),  # binomial
        ),
    )
    collective = "gather"

    def memory_bytes(self, case: MemoryCase, point: Point) -> int:
        # The root's: its input (S/n) and the gathered output (S).
        s = point.size_bytes
        return s // case.world_size + s + case.transport("gather", s) + chunk_temporaries(s)

    def setup(self, args: CollArgs, point: Point) -> None:
        n = args.world_size
        args.count = elements_for(point.size_bytes, args.element_size, n)
        args.input = torch.empty(args.count // n, dtype=args.dtype, device=args.device)
        args.output = None  # the other ranks pass no output list
        if args.rank == self.root:
            args.output = list(torch.empty(args.count, dtype=args.dtype, device=args.device).chunk(n))

    def fill(self, args: CollArgs) -> None:
        contribution(args.rank).write(args.input)
        for out in args.output or []:
            out.zero_()

    def calls(self, args: CollArgs, phase: str) -> list[Call]:
        return [Call(args.backend.gather, (args.output, args.input, self.root))]

    def wrong(self, args: CollArgs, phase: str) -> int:
        # The root's result; and every rank's input, which the API only reads.
        gathered = 0 if args.output is None else gathered_wrong(args.output)
        return gathered + contribution(args.rank).wrong(args.input)
