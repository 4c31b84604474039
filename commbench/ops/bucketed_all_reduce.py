"""bucketed_all_reduce: a step of DDP / apex gradient averaging over a workload of many tensors.

per_tensor all-reduces every gradient in place; bucketed_<M> flattens buckets of at least M
elements (per dtype, apex's message_size), all-reduces each, divides by n and copies back.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from commbench.ops.base import REDUCE_FACTOR, OpOption, OpSpec, Point, count_wrong
from commbench.ops.bucketer import AllReduceBucketer, average_
from commbench.ops.gradients import TENSORS, GradientStep, gradient_values, indices
from commbench.units import format_count, parse_count

if TYPE_CHECKING:
    from commbench.run.harness import CollArgs

DEFAULT_MESSAGE_SIZES = "256K,1M,1e7"
MESSAGE_SIZE = OpOption(
    "--message-size",
    "bucketed_all_reduce: minimum elements per all-reduce bucket (apex's message_size), one variant "
    f"bucketed_<M> each, e.g. 256K,1e7. [default: {DEFAULT_MESSAGE_SIZES}]",
)


# Every variant of one dtype moves the same numbers: compute them once (maxsize=1 bounds the memory).
@functools.lru_cache(maxsize=1)
def average_reference(
    numels: tuple[int, ...], rank: int, n: int, dtype: Any, device: Any
) -> tuple[list[Any], list[Any]]:
    """This rank's gradients, and the expected averages: from the value formula alone, over every rank."""
    grads, expected = [], []
    for i, k in enumerate(numels):
        grads.append(gradient_values(rank, i, k, indices(0, k, device)).to(dtype))
        expected.append(average_(sum(gradient_values(r, i, k, indices(0, k, device)) for r in range(n)).to(dtype), n))
    return grads, expected


class BucketedAllReduce(GradientStep):
    """per_tensor and bucketed_<message size> all-reduce averaging of one gradient workload."""

    spec = OpSpec(
        name="bucketed_all_reduce",
        summary="DDP / apex gradient averaging of the --tensors workload, one step per iteration; "
        "bucketed_<M> per --message-size in elements",
        s_definition="S = the whole workload's bytes (one step)",
        bus_factor=REDUCE_FACTOR,
        variants=("per_tensor", *(f"bucketed_{m}" for m in DEFAULT_MESSAGE_SIZES.split(","))),
        baseline="per_tensor",
        workload_knobs="--tensors",
        options=(TENSORS, MESSAGE_SIZE),
    )

    def __init__(self, options: Mapping[str, str] | None = None) -> None:
        super().__init__(options)
        text = self.options.get(MESSAGE_SIZE.key) or DEFAULT_MESSAGE_SIZES
        sizes = [parse_count(m, MESSAGE_SIZE.flag) for m in [m.strip() for m in text.split(",") if m.strip()] or [text]]
        # per_tensor is the same reducer with one tensor per bucket (message size 1).
        self.message_sizes = {"per_tensor": 1, **{f"bucketed_{format_count(m)}": m for m in sizes}}
        self.variants = tuple(self.message_sizes)

    def memory_bytes(self, point: Point, world_size: int) -> int:
        # Gradients, their cached values, the expected averages and the flattened buckets, at 8 bytes per element.
        return 4 * sum(self.numels) * 8

    def setup(self, args: CollArgs, point: Point) -> None:
        grads, args.expected = self.reference(args)
        args.input = [g.new_empty(g.shape) for g in grads]
        args.count = sum(self.numels)
        args.state = AllReduceBucketer(args.backend.all_reduce, args.world_size, self.message_sizes[args.variant])

    def reference(self, args: CollArgs) -> tuple[list[Any], list[Any]]:
        return average_reference(self.numels, args.rank, args.world_size, args.dtype, args.device)

    def issue(self, args: CollArgs, phase: str) -> None:
        for work in args.state.reduce(args.input):
            args.issue(work)

    def wrong(self, args: CollArgs, phase: str) -> int:
        return sum(count_wrong(grad, exp) for grad, exp in zip(args.input, args.expected))
