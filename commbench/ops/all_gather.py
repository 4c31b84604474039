"""all_gather: rank r's k elements land at [r*k, (r+1)*k) of every rank's output."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from commbench.lazy import torch
from commbench.ops.base import GATHER_FACTOR, Op, OpSpec, Point, count_wrong, elements_for, tiled

if TYPE_CHECKING:
    from commbench.run.harness import CollArgs


def contribution(rank: int, count: int, dtype: Any, device: Any) -> Any:
    """Rank-dependent small integers, exact in every dtype: (3r + j) % 11 + 1."""
    return (tiled(count, 11, 3 * rank, device) + 1).to(dtype)


class AllGather(Op):
    """Flat output (all_gather_into_tensor and its renames) or a list of n outputs."""

    spec = OpSpec(
        name="all_gather",
        summary="every rank contributes count/n elements; all ranks receive all of them",
        s_definition="S = gathered output bytes = per-rank count x element size x n",
        bus_factor=GATHER_FACTOR,
        variants=("flat", "list"),
    )

    def setup(self, args: CollArgs, point: Point) -> None:
        n = args.world_size
        args.count = elements_for(point.size_bytes, args.element_size, n)
        per_rank = args.count // n
        args.input = torch.empty(per_rank, dtype=args.dtype, device=args.device)
        flat = torch.empty(args.count, dtype=args.dtype, device=args.device)
        args.output = flat if args.variant == "flat" else list(flat.chunk(n))
        args.expected = torch.cat([contribution(r, per_rank, args.dtype, args.device) for r in range(n)])

    def fill(self, args: CollArgs) -> None:
        args.input.copy_(contribution(args.rank, args.input.numel(), args.dtype, args.device))
        for out in [args.output] if args.variant == "flat" else args.output:
            out.zero_()

    def issue(self, args: CollArgs, phase: str) -> None:
        if args.variant == "flat":
            args.issue(args.backend.all_gather_flat(args.output, args.input))
        else:
            args.issue(args.backend.all_gather_list(args.output, args.input))

    def wrong(self, args: CollArgs, phase: str) -> int:
        gathered = args.output if args.variant == "flat" else torch.cat(args.output)
        return count_wrong(gathered, args.expected)
