"""bucketed_reduce_scatter: a step of FSDP gradient reduction over a workload of many tensors.

Each gradient is flattened and padded to a multiple of n (as FSDP pads); rank r keeps shard r of
every gradient, summed over ranks. One iteration reduces the whole workload, one tensor at a time
(per_tensor), through the ReduceScatterBucketer at each cap (bucketed_<cap>MB), or all at once (flat).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from commbench.lazy import torch
from commbench.ops.bucketer import ReduceScatterBucketer
from commbench.ops.gradients import TENSORS, GradientStep, gradient_values, padded
from commbench.ops.memory import HEAP_LIMIT, MemoryCase
from commbench.ops.options import Listed, Number, OpOption
from commbench.ops.spec import GATHER_FACTOR, OpSpec, Point
from commbench.ops.values import chunk_temporaries, summed

if TYPE_CHECKING:
    from commbench.ops.args import CollArgs

BUCKET_CAP_MB = OpOption(
    "--bucket-cap-mb",
    "bucketed_reduce_scatter: bucket caps in MB (2**20 bytes), one variant bucketed_<cap>MB each; "
    "0 disables bucketing.",
    Listed(Number(0.0, "megabytes such as 1,5,25,100 (0 disables bucketing)")),
    default=(1.0, 5.0, 25.0, 100.0),
)


class BucketedReduceScatter(GradientStep):
    """per_tensor, bucketed_<cap>MB (one per --bucket-cap-mb) and flat reduce-scatters of one workload."""

    spec = OpSpec(
        name="bucketed_reduce_scatter",
        summary="FSDP gradient reduce-scatter of a workload of many tensors (--tensors, default a small "
        "transformer), one step per iteration; bucketed_<cap>MB per --bucket-cap-mb",
        s_definition="S = the whole workload's bytes per rank, each tensor padded to a multiple of n (one step)",
        bus_factor=GATHER_FACTOR,
        variants=("per_tensor", *(f"bucketed_{c:g}MB" for c in BUCKET_CAP_MB.default), "flat"),
        baseline="per_tensor",
        workload_knobs="--tensors or --bucket-cap-mb",
        options=(TENSORS, BUCKET_CAP_MB),
        # A bucket's flush waits before the next tensor is packed.
        completes_internally=lambda variant: variant != "per_tensor",
    )

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        caps: tuple[float, ...] = self.value(BUCKET_CAP_MB)
        self.caps_mb = {f"bucketed_{c:g}MB": c for c in caps}
        self.variants = ("per_tensor", *self.caps_mb, "flat")

    def memory_bytes(self, case: MemoryCase, point: Point) -> int:
        n, e = case.world_size, case.element_size
        grads = [padded(k, n) * e for k in self.numels]
        held = sum(grads) * (1 + 1 / n)  # the gradients and their output shards
        cap = self._cap_bytes(case.variant, n, e)
        if cap is None:  # per_tensor: every gradient's reduce-scatter in flight at once
            return int(held) + case.transport("reduce_scatter_flat", sum(grads)) + chunk_temporaries(max(grads))
        bucket = n * int(cap / e / n) * e  # n rows of ReduceScatterBucketer.shard_size columns
        # A bucket (n shards and its output shard) lives from its first use; a partly filled one is
        # copied to be contiguous at its flush (then a new output shard replaces the old); a gradient
        # larger than a bucket's shard goes alone, concatenated, with an output of its own.
        flush = [0 if case.variant == "flat" else bucket, case.transport("reduce_scatter_flat", bucket)]
        oversize = [g for g in grads if g // n > bucket // n]
        alone = max(oversize, default=0)
        direct = [alone, alone / n, case.transport("reduce_scatter_flat", alone)]
        below = max((g for g in oversize if g < HEAP_LIMIT), default=0)  # the largest the heap may keep
        heap = [*flush, bucket / n, below, below / n, case.transport("reduce_scatter_flat", below)]
        transient = max(sum(flush), sum(direct)) + case.heap_kept(heap)
        return int(held + bucket * (1 + 1 / n) + transient) + chunk_temporaries(max(grads))

    def setup(self, args: CollArgs, point: Point) -> None:
        n = args.world_size
        args.input = [torch.empty(padded(k, n), dtype=args.dtype, device=args.device) for k in self.numels]
        args.output = [torch.empty(g.numel() // n, dtype=args.dtype, device=args.device) for g in args.input]
        args.count = sum(g.numel() for g in args.input)
        if (cap := self._cap_bytes(args.variant, n, args.element_size)) is not None:
            args.state = ReduceScatterBucketer(args.backend.reduce_scatter_flat, n, cap / 2**20)

    def _cap_bytes(self, variant: str, world_size: int, element_size: int) -> float | None:
        """The variant's bucket cap in bytes; None for per_tensor (no bucketer)."""
        if variant == "per_tensor":
            return None
        if variant == "flat":  # the bucketer with one bucket that holds exactly the whole workload
            return sum(padded(k, world_size) for k in self.numels) * element_size + 1
        return self.caps_mb[variant] * 2**20

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
        # Rank r keeps shard r of every padded gradient, summed over ranks.
        n, mine = args.world_size, args.rank
        return sum(
            summed([gradient_values(q, i, k) for q in range(n)]).wrong(out, start=mine * out.numel())
            for i, (k, out) in enumerate(zip(self.numels, args.output))
        )
