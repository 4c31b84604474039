"""reduce_scatter_base: n shards summed over ranks; rank r keeps shard r."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from commbench.lazy import torch
from commbench.ops.base import GATHER_FACTOR, Op, OpSpec, Point, count_wrong, elements_for, tiled

if TYPE_CHECKING:
    from commbench.run.harness import CollArgs


def values(rank: int, s: int, shard: int, device: Any) -> Any:
    """Rank r's input in shard s, at flat indices g = s x shard + j: ((g + s) % 7) + 1 + (r % 2), small and exact."""
    return tiled(shard, 7, s * shard + s, device) + 1 + rank % 2


class ReduceScatterBase(Op):
    """Flat input (reduce_scatter_tensor and its renames) or a list of n inputs, summed."""

    spec = OpSpec(
        name="reduce_scatter_base",
        summary="sum n shards over ranks; rank r keeps shard r",
        s_definition="S = full input bytes per rank = shard count x element size x n",
        bus_factor=GATHER_FACTOR,
        variants=("flat", "list"),
    )

    def setup(self, args: CollArgs, point: Point) -> None:
        n = args.world_size
        args.count = elements_for(point.size_bytes, args.element_size, n)
        shard = args.count // n
        flat = torch.empty(args.count, dtype=args.dtype, device=args.device)
        args.input = flat if args.variant == "flat" else list(flat.chunk(n))
        args.output = torch.empty(shard, dtype=args.dtype, device=args.device)
        args.expected = sum(values(r, args.rank, shard, args.device) for r in range(n)).to(args.dtype)

    def fill(self, args: CollArgs) -> None:
        shard = args.output.numel()
        for s, dst in enumerate(self._inputs(args)):
            dst.copy_(values(args.rank, s, shard, args.device))
        args.output.zero_()

    def issue(self, args: CollArgs, phase: str) -> None:
        if args.variant == "flat":
            args.issue(args.backend.reduce_scatter_flat(args.output, args.input))
        else:
            args.issue(args.backend.reduce_scatter_list(args.output, args.input))

    def wrong(self, args: CollArgs, phase: str) -> int:
        return count_wrong(args.output, args.expected)

    @staticmethod
    def _inputs(args: CollArgs) -> list[Any]:
        return list(args.input.chunk(args.world_size)) if torch.is_tensor(args.input) else args.input
