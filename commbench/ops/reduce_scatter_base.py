"""reduce_scatter_base: n shards summed over ranks; rank r keeps shard r."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from commbench.lazy import torch
from commbench.ops.base import GATHER_FACTOR, Op, OpSpec, Point, elements_for
from commbench.ops.values import CHUNK_TEMPORARY_BYTES, Values, summed

if TYPE_CHECKING:
    from commbench.run.harness import CollArgs


def shard_values(rank: int, s: int, shard: int) -> Values:
    """Rank r's input in shard s at index j, flat index g = s x shard + j: (g + s) % 7 + 1 + r % 2, small and exact."""
    return Values(lambda j: (j + s * shard + s) % 7 + 1 + rank % 2, period=7)


class ReduceScatterBase(Op):
    """Flat input (reduce_scatter_tensor and its renames) or a list of n inputs, summed."""

    spec = OpSpec(
        name="reduce_scatter_base",
        summary="sum n shards over ranks; rank r keeps shard r",
        s_definition="S = full input bytes per rank = shard count x element size x n",
        bus_factor=GATHER_FACTOR,
        variants=("flat", "list"),
    )

    def memory_bytes(self, args: CollArgs, point: Point) -> int:
        # Input (S) and output (S/n); the result is checked against values computed chunk by chunk.
        s = point.size_bytes
        call = "reduce_scatter_flat" if args.variant == "flat" else "reduce_scatter_list"
        return s + s // args.world_size + args.backend.scratch_bytes(call, s, args.window) + CHUNK_TEMPORARY_BYTES

    def setup(self, args: CollArgs, point: Point) -> None:
        n = args.world_size
        args.count = elements_for(point.size_bytes, args.element_size, n)
        flat = torch.empty(args.count, dtype=args.dtype, device=args.device)
        args.input = flat if args.variant == "flat" else list(flat.chunk(n))
        args.output = torch.empty(args.count // n, dtype=args.dtype, device=args.device)

    def fill(self, args: CollArgs) -> None:
        shard = args.output.numel()
        for s, dst in enumerate(self._inputs(args)):
            shard_values(args.rank, s, shard).write(dst)
        args.output.zero_()

    def issue(self, args: CollArgs, phase: str) -> None:
        if args.variant == "flat":
            args.issue(args.backend.reduce_scatter_flat(args.output, args.input))
        else:
            args.issue(args.backend.reduce_scatter_list(args.output, args.input))

    def wrong(self, args: CollArgs, phase: str) -> int:
        shard = args.output.numel()
        return summed([shard_values(q, args.rank, shard) for q in range(args.world_size)]).wrong(args.output)

    @staticmethod
    def _inputs(args: CollArgs) -> list[Any]:
        return list(args.input.chunk(args.world_size)) if torch.is_tensor(args.input) else args.input
