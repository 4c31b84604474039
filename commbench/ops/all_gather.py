"""all_gather: rank r's k elements land at [r*k, (r+1)*k) of every rank's output."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from commbench.lazy import torch
from commbench.ops.base import GATHER_FACTOR, Op, OpSpec, Point, elements_for
from commbench.ops.values import CHUNK_TEMPORARY_BYTES, Values

if TYPE_CHECKING:
    from commbench.run.harness import CollArgs


def contribution(rank: int) -> Values:
    """Rank r's input at index j: (3r + j) % 11 + 1, small integers exact in every dtype."""
    return Values(lambda j: (j + 3 * rank) % 11 + 1, period=11)


class AllGather(Op):
    """Flat output (all_gather_into_tensor and its renames) or a list of n outputs."""

    spec = OpSpec(
        name="all_gather",
        summary="every rank contributes count/n elements; all ranks receive all of them",
        s_definition="S = gathered output bytes = per-rank count x element size x n",
        bus_factor=GATHER_FACTOR,
        variants=("flat", "list"),
    )

    def memory_bytes(self, args: CollArgs, point: Point) -> int:
        # Input (S/n) and output (S); the result is checked against values computed chunk by chunk.
        s = point.size_bytes
        scratch = args.backend.scratch_bytes(
            "all_gather_flat" if args.variant == "flat" else "all_gather_list", s, args.window
        )
        return s // args.world_size + s + scratch + CHUNK_TEMPORARY_BYTES

    def setup(self, args: CollArgs, point: Point) -> None:
        n = args.world_size
        args.count = elements_for(point.size_bytes, args.element_size, n)
        args.input = torch.empty(args.count // n, dtype=args.dtype, device=args.device)
        flat = torch.empty(args.count, dtype=args.dtype, device=args.device)
        args.output = flat if args.variant == "flat" else list(flat.chunk(n))

    def fill(self, args: CollArgs) -> None:
        contribution(args.rank).write(args.input)
        for out in self._outputs(args):
            out.zero_()

    def issue(self, args: CollArgs, phase: str) -> None:
        if args.variant == "flat":
            args.issue(args.backend.all_gather_flat(args.output, args.input))
        else:
            args.issue(args.backend.all_gather_list(args.output, args.input))

    def wrong(self, args: CollArgs, phase: str) -> int:
        return sum(contribution(r).wrong(out) for r, out in enumerate(self._outputs(args)))

    @staticmethod
    def _outputs(args: CollArgs) -> list[Any]:
        """Rank r's part of the output, for each r."""
        return list(args.output.chunk(args.world_size)) if torch.is_tensor(args.output) else args.output
