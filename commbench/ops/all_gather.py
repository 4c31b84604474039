"""all_gather: rank r's k elements land at [r*k, (r+1)*k) of every rank's output.

`inplace` is nccl-tests' in-place column: each rank's input is a view of its own chunk of the output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from commbench.lazy import torch
from commbench.ops.base import Call, CallsOp
from commbench.ops.cost import Cost, lg
from commbench.ops.memory import MemoryCase
from commbench.ops.spec import GATHER_FACTOR, GATHERED, OpSpec, Point, Recorded, elements_for
from commbench.ops.values import chunk_temporaries, contribution, gathered_wrong

if TYPE_CHECKING:
    from commbench.backends.base import Backend
    from commbench.ops.args import CollArgs


class AllGather(CallsOp):
    """Flat output (all_gather_into_tensor and its renames), a list of n outputs, or flat in place."""

    spec = OpSpec(
        name="all_gather",
        summary="every rank contributes count/n elements; all ranks receive all of them",
        s_definition="S = gathered output bytes = per-rank count x element size x n",
        bus_factor=GATHER_FACTOR,
        variants=("flat", "list", "inplace"),
        recorded=Recorded(
            {
                "allgather": "list",
                "all_gather": "list",
                "_allgather_base": "flat",
                "all_gather_into_tensor": "flat",
                "allgather_into_tensor": "flat",
            },
            GATHERED,
        ),
        cost=Cost(
            ring=lambda p: (p - 1, (p - 1) / p),
            tree=lambda p: (lg(p), (p - 1) / p),  # recursive doubling
        ),
    )

    def unavailable(self, variant: str, backend: Backend) -> str | None:
        return backend.missing("all_gather_inplace") if variant == "inplace" else None

    def memory_bytes(self, case: MemoryCase, point: Point) -> int:
        # The output (S) and the input (S/n, none in place); the result is checked against values
        # computed chunk by chunk.
        s = point.size_bytes
        own = 0 if case.variant == "inplace" else s // case.world_size
        call = "all_gather_list" if case.variant == "list" else "all_gather_flat"
        return s + own + case.transport(call, s) + chunk_temporaries(s)

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

    def fill(self, args: CollArgs) -> None:
        # Outputs first: in place, the input is part of the output.
        for out in self._outputs(args):
            out.zero_()
        contribution(args.rank).write(args.input)

    def calls(self, args: CollArgs, phase: str) -> list[Call]:
        backend = args.backend
        return [
            Call(
                backend.all_gather_list if args.variant == "list" else backend.all_gather_flat,
                (args.output, args.input),
            )
        ]

    def wrong(self, args: CollArgs, phase: str) -> int:
        return gathered_wrong(self._outputs(args))

    @staticmethod
    def _outputs(args: CollArgs) -> list[Any]:
        """Rank r's part of the output, for each r."""
        return list(args.output.chunk(args.world_size)) if torch.is_tensor(args.output) else args.output
