"""all_gather: rank r's k elements land at [r*k, (r+1)*k) of every rank's output.

`inplace` is nccl-tests' in-place column: each rank's input is a view of its own chunk of the output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from commbench.lazy import torch
from commbench.ops.base import GATHER_FACTOR, Op, OpSpec, Point, count_wrong, elements_for, tiled

if TYPE_CHECKING:
    from commbench.backends.base import Backend
    from commbench.run.harness import CollArgs


def contribution(rank: int, count: int, dtype: Any, device: Any) -> Any:
    """Rank-dependent small integers, exact in every dtype: (3r + j) % 11 + 1."""
    return (tiled(count, 11, 3 * rank, device) + 1).to(dtype)


def every_contribution(world_size: int, count: int, dtype: Any, device: Any) -> Any:
    """Rank 0's contribution, then rank 1's, ...: what a gather of count elements per rank holds."""
    return torch.cat([contribution(r, count, dtype, device) for r in range(world_size)])


class AllGather(Op):
    """Flat output (all_gather_into_tensor and its renames), a list of n outputs, or flat in place."""

    spec = OpSpec(
        name="all_gather",
        summary="every rank contributes count/n elements; all ranks receive all of them",
        s_definition="S = gathered output bytes = per-rank count x element size x n",
        bus_factor=GATHER_FACTOR,
        variants=("flat", "list", "inplace"),
    )

    def unavailable(self, variant: str, backend: Backend) -> str | None:
        return backend.missing("all_gather_inplace") if variant == "inplace" else None

    def setup(self, args: CollArgs, point: Point) -> None:
        n = args.world_size
        args.count = elements_for(point.size_bytes, args.element_size, n)
        per_rank = args.count // n
        flat = torch.empty(args.count, dtype=args.dtype, device=args.device)
        if args.variant == "inplace":
            args.input = flat[args.rank * per_rank : (args.rank + 1) * per_rank]
        else:
            args.input = torch.empty(per_rank, dtype=args.dtype, device=args.device)
        args.output = list(flat.chunk(n)) if args.variant == "list" else flat
        args.expected = every_contribution(n, per_rank, args.dtype, args.device)

    def fill(self, args: CollArgs) -> None:
        # Outputs first: in place, the input is part of the output.
        for out in args.output if args.variant == "list" else [args.output]:
            out.zero_()
        args.input.copy_(contribution(args.rank, args.input.numel(), args.dtype, args.device))

    def issue(self, args: CollArgs, phase: str) -> None:
        if args.variant == "list":
            args.issue(args.backend.all_gather_list(args.output, args.input))
        else:
            args.issue(args.backend.all_gather_flat(args.output, args.input))

    def wrong(self, args: CollArgs, phase: str) -> int:
        gathered = torch.cat(args.output) if args.variant == "list" else args.output
        return count_wrong(gathered, args.expected)
