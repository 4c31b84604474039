"""reduce_scatter_base: n shards summed over ranks; rank r keeps shard r.

`inplace` is nccl-tests' in-place column: the output is a view of the rank's own shard of the input.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from commbench.lazy import torch
from commbench.ops.base import GATHER_FACTOR, Op, OpSpec, Point, count_wrong, elements_for, tiled

if TYPE_CHECKING:
    from commbench.backends.base import Backend
    from commbench.run.harness import CollArgs


def values(rank: int, s: int, shard: int, device: Any) -> Any:
    """Rank r's input in shard s, at flat indices g = s x shard + j: ((g + s) % 7) + 1 + (r % 2), small and exact."""
    return tiled(shard, 7, s * shard + s, device) + 1 + rank % 2


class ReduceScatterBase(Op):
    """Flat input (reduce_scatter_tensor and its renames), a list of n inputs, or flat in place; summed."""

    spec = OpSpec(
        name="reduce_scatter_base",
        summary="sum n shards over ranks; rank r keeps shard r",
        s_definition="S = full input bytes per rank = shard count x element size x n",
        bus_factor=GATHER_FACTOR,
        variants=("flat", "list", "inplace"),
    )

    def unavailable(self, variant: str, backend: Backend) -> str | None:
        return backend.missing("reduce_scatter_inplace") if variant == "inplace" else None

    def setup(self, args: CollArgs, point: Point) -> None:
        n = args.world_size
        args.count = elements_for(point.size_bytes, args.element_size, n)
        shard = args.count // n
        flat = torch.empty(args.count, dtype=args.dtype, device=args.device)
        args.input = list(flat.chunk(n)) if args.variant == "list" else flat
        if args.variant == "inplace":
            args.output = flat[args.rank * shard : (args.rank + 1) * shard]
        else:
            args.output = torch.empty(shard, dtype=args.dtype, device=args.device)
        args.expected = sum(values(r, args.rank, shard, args.device) for r in range(n)).to(args.dtype)

    def fill(self, args: CollArgs) -> None:
        n, shard = args.world_size, args.output.numel()
        if args.variant != "inplace":  # in place, the output is part of the input written below
            args.output.zero_()
        if args.state is not None:
            for dst, src in zip(self._inputs(args), args.state.chunk(n)):
                dst.copy_(src)
            return
        for s, dst in enumerate(self._inputs(args)):
            dst.copy_(values(args.rank, s, shard, args.device))

    def before(self, args: CollArgs, phase: str) -> None:
        # In place, the result overwrites this rank's input shard: refill (untimed) so every sample
        # reduces the same numbers, as all_reduce does; from a copy kept once, since this runs per sample.
        if args.variant == "inplace":
            if args.state is None:
                args.state = args.input.clone()
            self.fill(args)

    def issue(self, args: CollArgs, phase: str) -> None:
        if args.variant == "list":
            args.issue(args.backend.reduce_scatter_list(args.output, args.input))
        else:
            args.issue(args.backend.reduce_scatter_flat(args.output, args.input))

    def wrong(self, args: CollArgs, phase: str) -> int:
        return count_wrong(args.output, args.expected)

    @staticmethod
    def _inputs(args: CollArgs) -> list[Any]:
        return list(args.input.chunk(args.world_size)) if torch.is_tensor(args.input) else args.input
