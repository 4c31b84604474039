"""scatter: chunk r of the root's buffer lands in rank r's output."""

from __future__ import annotations

from typing import TYPE_CHECKING

from commbench.lazy import torch
from commbench.ops.all_gather import contribution, every_contribution
from commbench.ops.base import GATHER_FACTOR, OpSpec, Point, count_wrong, elements_for
from commbench.ops.rooted import ROOT, RootedOp

if TYPE_CHECKING:
    from commbench.run.harness import CollArgs


class Scatter(RootedOp):
    """n views of one flat buffer on --root, one to each rank (nccl-tests' scatter_perf)."""

    spec = OpSpec(
        name="scatter",
        summary="the root sends chunk r of its count elements to rank r (--root, default 0)",
        s_definition="S = scattered bytes at the root = per-rank count x element size x n",
        bus_factor=GATHER_FACTOR,
        variants=("flat",),
        options=(ROOT,),
    )
    collective = "scatter"

    def setup(self, args: CollArgs, point: Point) -> None:
        n = args.world_size
        args.count = elements_for(point.size_bytes, args.element_size, n)
        per_rank = args.count // n
        args.output = torch.empty(per_rank, dtype=args.dtype, device=args.device)
        args.expected = contribution(args.rank, per_rank, args.dtype, args.device)
        args.input = args.state = None  # the other ranks pass no input list
        if args.rank == self.root:
            args.input = list(torch.empty(args.count, dtype=args.dtype, device=args.device).chunk(n))
            args.state = every_contribution(n, per_rank, args.dtype, args.device)

    def fill(self, args: CollArgs) -> None:
        if args.input is not None:
            for dst, src in zip(args.input, args.state.chunk(args.world_size)):
                dst.copy_(src)
        args.output.zero_()

    def issue(self, args: CollArgs, phase: str) -> None:
        args.issue(args.backend.scatter(args.output, args.input, self.root))

    def wrong(self, args: CollArgs, phase: str) -> int:
        # Every rank's chunk; and the root's buffer, which the API only reads.
        sent = 0 if args.input is None else count_wrong(torch.cat(args.input), args.state)
        return count_wrong(args.output, args.expected) + sent
