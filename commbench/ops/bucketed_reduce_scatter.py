"""bucketed_reduce_scatter: a step of FSDP gradient reduction over a workload of many tensors.

Each gradient is flattened and padded to a multiple of n (as FSDP pads); rank r keeps shard r of
every gradient, summed over ranks. One iteration reduces the whole workload, one tensor at a time
(per_tensor), through the ReduceScatterBucketer at each cap (bucketed_<cap>MB), or all at once (flat).
"""

from __future__ import annotations

import functools
from typing import Mapping

import torch

from commbench.bucketer import ReduceScatterBucketer
from commbench.harness import CollArgs
from commbench.ops.base import count_wrong
from commbench.ops.gradients import GradientStep, gradient_values, indices, padded
from commbench.ops.options import BUCKET_CAP_MB, format_mb, parse_caps_mb

DEFAULT_CAPS_MB = "1,5,25,100"


# Every variant of one dtype moves the same numbers: compute them once (maxsize=1 bounds the memory).
@functools.lru_cache(maxsize=1)
def shard_reference(numels: tuple[int, ...], rank: int, n: int, dtype: torch.dtype,
                    device: torch.device) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """This rank's padded gradients, and its expected shards: from the value formula alone, summed over ranks."""
    grads, expected = [], []
    for i, k in enumerate(numels):
        p = padded(k, n)
        grads.append(gradient_values(rank, i, k, indices(0, p, device)).to(dtype))
        mine = indices(rank * (p // n), (rank + 1) * (p // n), device)
        expected.append(sum(gradient_values(q, i, k, mine) for q in range(n)).to(dtype))
    return grads, expected


class BucketedReduceScatter(GradientStep):
    """per_tensor, bucketed_<cap>MB (one per --bucket-cap-mb) and flat reduce-scatters of one workload."""

    name = "bucketed_reduce_scatter"
    variants = ("per_tensor", *(f"bucketed_{c}MB" for c in DEFAULT_CAPS_MB.split(",")), "flat")

    def __init__(self, options: Mapping[str, str] | None = None) -> None:
        super().__init__(options)
        self.caps_mb = {f"bucketed_{format_mb(c)}MB": c for c in parse_caps_mb(self.options.get(BUCKET_CAP_MB) or DEFAULT_CAPS_MB)}
        self.variants = ("per_tensor", *self.caps_mb, "flat")

    def memory_bytes(self, size_bytes: int, world_size: int) -> int:
        # Gradients and their cached values (2 W), shards and expected (2 W / n), and the largest bucket with
        # its output shards (the cap, 2 cap / n), at 8 bytes per element (the widest dtype).
        workload = sum(padded(k, world_size) for k in self.numels) * 8
        cap = max([workload, *(c * 2**20 for c in self.caps_mb.values())])
        return int((2 + 2 / world_size) * (workload + cap))

    def setup(self, args: CollArgs, size_bytes: int) -> None:
        n = args.world_size
        grads, args.expected = self.reference(args)
        args.input = [torch.empty_like(g) for g in grads]
        args.output = [torch.empty(g.numel() // n, dtype=args.dtype, device=args.device) for g in grads]
        args.count = sum(g.numel() for g in grads)
        if args.variant != "per_tensor":
            # flat is the bucketer with one bucket that holds exactly the whole workload.
            whole_mb = (args.count * args.element_size + 1) / 2**20
            cap = whole_mb if args.variant == "flat" else self.caps_mb[args.variant]
            args.state = ReduceScatterBucketer(args.backend.reduce_scatter_flat, n, cap)

    def reference(self, args: CollArgs) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        return shard_reference(self.numels, args.rank, args.world_size, args.dtype, args.device)

    def issue(self, args: CollArgs, phase: str) -> None:
        if args.variant == "per_tensor":
            for out, grad in zip(args.output, args.input):
                args.issue(args.backend.reduce_scatter_flat(out, grad))
            return
        bucketer: ReduceScatterBucketer = args.state
        for out, grad in zip(args.output, args.input):
            bucketer.reduce_scatter_async(list(grad.chunk(args.world_size)), out.copy_)
        bucketer.flush()

    def wrong(self, args: CollArgs, phase: str) -> int:
        return sum(count_wrong(out, exp) for out, exp in zip(args.output, args.expected))

    def bus_factor(self, world_size: int) -> float:
        return (world_size - 1) / world_size
