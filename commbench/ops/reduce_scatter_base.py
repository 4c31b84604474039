"""reduce_scatter_base: n shards summed over ranks; rank r keeps shard r.

`inplace` is nccl-tests' in-place column: the output is a view of the rank's own shard of the input.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from commbench.lazy import torch
from commbench.ops.base import Call, CallsOp
from commbench.ops.cost import Cost, lg
from commbench.ops.memory import MemoryCase
from commbench.ops.spec import GATHER_FACTOR, INPUT, OpSpec, Point, Recorded, elements_for
from commbench.ops.values import Values, chunk_temporaries, summed

if TYPE_CHECKING:
    from commbench.backends.base import Backend
    from commbench.ops.args import CollArgs


def shard_values(rank: int, s: int, shard: int) -> Values:
    """Rank r's input in shard s at index j, flat index g = s x shard + j: (g + s) % 7 + 1 + r % 2, small and exact."""
    return Values(lambda j: (j + s * shard + s) % 7 + 1 + rank % 2, period=7, largest=9)


class ReduceScatterBase(CallsOp):
    """Flat input (reduce_scatter_tensor and its renames), a list of n inputs, or flat in place; summed."""

    spec = OpSpec(
        name="reduce_scatter_base",
        summary="sum n shards over ranks; rank r keeps shard r",
        s_definition="S = full input bytes per rank = shard count x element size x n",
        bus_factor=GATHER_FACTOR,
        variants=("flat", "list", "inplace"),
        recorded=Recorded(
            {
                "reduce_scatter": "list",
                "_reduce_scatter_base": "flat",
                "reduce_scatter_tensor": "flat",
                "reduce_scatter_tensor_coalesced": "flat",
            },
            INPUT,
            even=("flat", "list", "inplace"),
            reduces=True,
        ),
        cost=Cost(
            ring=lambda p: (p - 1, (p - 1) / p),
            tree=lambda p: (lg(p), (p - 1) / p),  # recursive halving
        ),
    )

    def unavailable(self, variant: str, backend: Backend) -> str | None:
        return backend.missing("reduce_scatter_inplace") if variant == "inplace" else None

    def memory_bytes(self, case: MemoryCase, point: Point) -> int:
        # The input (S) and the output (S/n, none in place); the result is checked against values
        # computed chunk by chunk, and in place the input is refilled from them, not from a copy.
        s = point.size_bytes
        own = 0 if case.variant == "inplace" else s // case.world_size
        call = "reduce_scatter_list" if case.variant == "list" else "reduce_scatter_flat"
        return s + own + case.transport(call, s) + chunk_temporaries(s)

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

    def fill(self, args: CollArgs) -> None:
        shard = args.output.numel()
        if args.variant != "inplace":  # in place, the output is part of the input written below
            args.output.zero_()
        for s, dst in enumerate(self._inputs(args)):
            shard_values(args.rank, s, shard).write(dst)

    def before(self, args: CollArgs, phase: str) -> None:
        # In place, the result overwrites this rank's input shard: refill (untimed) so every sample
        # reduces the same numbers, as all_reduce does.
        if args.variant == "inplace":
            self.fill(args)

    def calls(self, args: CollArgs, phase: str) -> list[Call]:
        backend = args.backend
        method = backend.reduce_scatter_list if args.variant == "list" else backend.reduce_scatter_flat
        return [Call(method, (args.output, args.input))]

    def wrong(self, args: CollArgs, phase: str) -> int:
        shard = args.output.numel()
        return summed([shard_values(q, args.rank, shard) for q in range(args.world_size)]).wrong(args.output)

    @staticmethod
    def _inputs(args: CollArgs) -> list[Any]:
        return list(args.input.chunk(args.world_size)) if torch.is_tensor(args.input) else args.input
