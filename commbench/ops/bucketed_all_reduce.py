"""bucketed_all_reduce: a step of DDP / apex gradient averaging over a workload of many tensors.

per_tensor all-reduces every gradient in place; bucketed_<M> flattens buckets of at least M
elements (per dtype, apex's message_size), all-reduces each, divides by n and copies back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from commbench.lazy import torch
from commbench.ops.bucketer import AllReduceBucketer, average_, buckets_of
from commbench.ops.gradients import TENSORS, GradientStep, gradient_values
from commbench.ops.memory import MemoryCase
from commbench.ops.options import Count, Listed, OpOption
from commbench.ops.spec import REDUCE_FACTOR, OpSpec, Point
from commbench.ops.values import Values, chunk_temporaries, summed
from commbench.units import format_count

if TYPE_CHECKING:
    from commbench.ops.args import CollArgs

MESSAGE_SIZE = OpOption(
    "--message-size",
    "bucketed_all_reduce: minimum elements per all-reduce bucket (apex's message_size), one variant "
    "bucketed_<M> each, e.g. 256K,1e7.",
    Listed(Count()),
    default=(256 << 10, 1 << 20, 10**7),
)


class BucketedAllReduce(GradientStep):
    """per_tensor and bucketed_<message size> all-reduce averaging of one gradient workload."""

    spec = OpSpec(
        name="bucketed_all_reduce",
        summary="DDP / apex gradient averaging of the --tensors workload, one step per iteration; "
        "bucketed_<M> per --message-size in elements",
        s_definition="S = the whole workload's bytes (one step)",
        bus_factor=REDUCE_FACTOR,
        variants=("per_tensor", *(f"bucketed_{format_count(m)}" for m in MESSAGE_SIZE.default)),
        baseline="per_tensor",
        workload_knobs="--tensors",
        options=(TENSORS, MESSAGE_SIZE),
    )

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        sizes: tuple[int, ...] = self.value(MESSAGE_SIZE)
        # per_tensor is the same reducer with one tensor per bucket (message size 1).
        self.message_sizes = {"per_tensor": 1, **{f"bucketed_{format_count(m)}": m for m in sizes}}
        self.variants = tuple(self.message_sizes)

    def memory_bytes(self, case: MemoryCase, point: Point) -> int:
        # The gradients, and a flat copy of every bucket of more than one tensor: all of a step's
        # buckets (window steps' in non-blocking mode) are in flight before the first is waited on.
        buckets = buckets_of([(None, k) for k in self.numels], self.message_sizes[case.variant])
        copied = sum(self.numels[i] for bucket in buckets if len(bucket) > 1 for i in bucket)
        copies = case.transport("all_reduce", max(self.numels) * case.element_size)
        return (
            (sum(self.numels) + copied * case.window) * case.element_size
            + copies
            + chunk_temporaries(max(self.numels) * case.element_size)
        )

    def setup(self, args: CollArgs, point: Point) -> None:
        args.input = [torch.empty(k, dtype=args.dtype, device=args.device) for k in self.numels]
        args.count = sum(self.numels)
        args.state = AllReduceBucketer(args.backend.all_reduce, args.world_size, self.message_sizes[args.variant])

    def issue(self, args: CollArgs, phase: str) -> None:
        for work in args.state.reduce(args.input):
            args.issue(work)

    def wrong(self, args: CollArgs, phase: str) -> int:
        n, dtype = args.world_size, args.dtype
        total = 0
        for i, (k, grad) in enumerate(zip(self.numels, args.input)):
            sums = summed([gradient_values(r, i, k) for r in range(n)])
            # The average as the reducer takes it: of the sum in the gradient's dtype. Past a half
            # type's exact integers the transport's sum rounds (sum_tolerance, from the sum's largest
            # value and terms), and the division by n rounds once more on each side: two terms more.
            average = lambda idx, sums=sums: average_(sums.formula(idx).to(dtype), n)  # noqa: E731
            total += Values(average, largest=sums.largest, terms=sums.terms + 2).wrong(grad)
        return total
