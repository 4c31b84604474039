"""bucketed_reduce_scatter: a step of FSDP gradient reduction over a workload of many tensors.

Each gradient is flattened and padded to a multiple of n (as FSDP pads); rank r keeps shard r of
every gradient, summed over ranks. One iteration reduces the whole workload, one tensor at a time
(per_tensor), through the ReduceScatterBucketer at each cap (bucketed_<cap>MB), or all at once (flat).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from commbench.errors import UserError
from commbench.lazy import torch
from commbench.ops.base import GATHER_FACTOR, OpOption, OpSpec, Point, count_wrong
from commbench.ops.bucketer import ReduceScatterBucketer
from commbench.ops.gradients import TENSORS, GradientStep, gradient_values, indices, padded

if TYPE_CHECKING:
    from commbench.run.harness import CollArgs

DEFAULT_CAPS_MB = "1,5,25,100"
BUCKET_CAP_MB = OpOption(
    "--bucket-cap-mb",
    "bucketed_reduce_scatter: bucket caps in MB (2**20 bytes), one variant bucketed_<cap>MB each; "
    f"0 disables bucketing. [default: {DEFAULT_CAPS_MB}]",
)


def parse_caps_mb(text: str) -> tuple[float, ...]:
    """'1,5,25' -> (1.0, 5.0, 25.0); 0 disables bucketing, negatives are refused."""
    caps: list[float] = []
    for item in [c.strip() for c in str(text).split(",") if c.strip()] or [str(text)]:
        try:
            cap = float(item)
        except ValueError:
            raise UserError(
                f"--bucket-cap-mb {item!r} is not a number: give megabytes such as 1,5,25,100 (0 disables bucketing)"
            ) from None
        if not cap >= 0 or cap == float("inf"):
            raise UserError(
                f"--bucket-cap-mb {item!r} must be a finite number of megabytes >= 0 (0 disables bucketing)"
            )
        caps.append(cap)
    return tuple(dict.fromkeys(caps))


# Every variant of one dtype moves the same numbers: compute them once (maxsize=1 bounds the memory).
@functools.lru_cache(maxsize=1)
def shard_reference(numels: tuple[int, ...], rank: int, n: int, dtype: Any, device: Any) -> tuple[list[Any], list[Any]]:
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

    spec = OpSpec(
        name="bucketed_reduce_scatter",
        summary="FSDP gradient reduce-scatter of a workload of many tensors (--tensors, default a small "
        "transformer), one step per iteration; bucketed_<cap>MB per --bucket-cap-mb",
        s_definition="S = the whole workload's bytes per rank, each tensor padded to a multiple of n (one step)",
        bus_factor=GATHER_FACTOR,
        variants=("per_tensor", *(f"bucketed_{c}MB" for c in DEFAULT_CAPS_MB.split(",")), "flat"),
        baseline="per_tensor",
        workload_knobs="--tensors or --bucket-cap-mb",
        options=(TENSORS, BUCKET_CAP_MB),
    )

    def __init__(self, options: Mapping[str, str] | None = None) -> None:
        super().__init__(options)
        caps = parse_caps_mb(self.options.get(BUCKET_CAP_MB.key) or DEFAULT_CAPS_MB)
        self.caps_mb = {f"bucketed_{c:g}MB": c for c in caps}
        self.variants = ("per_tensor", *self.caps_mb, "flat")

    def completes_internally(self, variant: str) -> bool:
        return variant != "per_tensor"  # a bucket's flush waits before the next tensor is packed

    def memory_bytes(self, point: Point, world_size: int) -> int:
        # Gradients and their cached values (2 W), shards and expected (2 W / n), and the largest bucket with
        # its output shards (the cap, 2 cap / n), at 8 bytes per element (the widest dtype).
        workload = sum(padded(k, world_size) for k in self.numels) * 8
        cap = max([workload, *(c * 2**20 for c in self.caps_mb.values())])
        return int((2 + 2 / world_size) * (workload + cap))

    def setup(self, args: CollArgs, point: Point) -> None:
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

    def reference(self, args: CollArgs) -> tuple[list[Any], list[Any]]:
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
