"""all_gather: rank r's k elements land at [r*k, (r+1)*k) of every rank's output."""

from __future__ import annotations

import torch

from commbench.harness import CollArgs
from commbench.ops.base import Op, count_wrong, elements_for


def contribution(rank: int, count: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Rank-dependent small integers, exact in every dtype: (3r + j) % 11 + 1."""
    return ((torch.arange(count, device=device) + 3 * rank) % 11 + 1).to(dtype)


class AllGather(Op):
    """Flat output (all_gather_into_tensor and its renames) or a list of n outputs."""

    name = "all_gather"
    variants = ("flat", "list")

    def setup(self, args: CollArgs, size_bytes: int) -> None:
        n = args.world_size
        args.count = elements_for(size_bytes, args.element_size, n)
        per_rank = args.count // n
        args.input = torch.empty(per_rank, dtype=args.dtype, device=args.device)
        flat = torch.empty(args.count, dtype=args.dtype, device=args.device)
        args.output = flat if args.variant == "flat" else list(flat.chunk(n))
        args.expected = torch.cat([contribution(r, per_rank, args.dtype, args.device) for r in range(n)])

    def fill(self, args: CollArgs) -> None:
        args.input.copy_(contribution(args.rank, args.input.numel(), args.dtype, args.device))
        for out in ([args.output] if args.variant == "flat" else args.output):
            out.zero_()

    def issue(self, args: CollArgs, phase: str) -> None:
        if args.variant == "flat":
            args.issue(args.backend.all_gather_flat(args.output, args.input))
        else:
            args.issue(args.backend.all_gather_list(args.output, args.input))

    def wrong(self, args: CollArgs, phase: str) -> int:
        gathered = args.output if args.variant == "flat" else torch.cat(args.output)
        return count_wrong(gathered, args.expected)

    def bus_factor(self, world_size: int) -> float:
        return (world_size - 1) / world_size
