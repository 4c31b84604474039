"""bucketed_all_reduce: a step of DDP / apex gradient averaging over a workload of many tensors.

per_tensor all-reduces every gradient in place; bucketed_<M> flattens buckets of at least M
elements (per dtype, apex's message_size), all-reduces each, divides by n and copies back.
"""

from __future__ import annotations

import functools
from typing import Mapping

import torch

from commbench.bucketer import AllReduceBucketer, average_
from commbench.harness import CollArgs
from commbench.ops.base import count_wrong
from commbench.ops.gradients import GradientStep, gradient_values, indices
from commbench.ops.options import MESSAGE_SIZE, split_list
from commbench.workload import format_count, parse_count

DEFAULT_MESSAGE_SIZES = "256K,1M,1e7"


# Every variant of one dtype moves the same numbers: compute them once (maxsize=1 bounds the memory).
@functools.lru_cache(maxsize=1)
def average_reference(numels: tuple[int, ...], rank: int, n: int, dtype: torch.dtype,
                      device: torch.device) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """This rank's gradients, and the expected averages: from the value formula alone, over every rank."""
    grads, expected = [], []
    for i, k in enumerate(numels):
        grads.append(gradient_values(rank, i, k, indices(0, k, device)).to(dtype))
        expected.append(average_(sum(gradient_values(r, i, k, indices(0, k, device)) for r in range(n)).to(dtype), n))
    return grads, expected


class BucketedAllReduce(GradientStep):
    """per_tensor and bucketed_<message size> all-reduce averaging of one gradient workload."""

    name = "bucketed_all_reduce"
    variants = ("per_tensor", *(f"bucketed_{m}" for m in DEFAULT_MESSAGE_SIZES.split(",")))

    def __init__(self, options: Mapping[str, str] | None = None) -> None:
        super().__init__(options)
        text = self.options.get(MESSAGE_SIZE) or DEFAULT_MESSAGE_SIZES
        sizes = [parse_count(m, "--message-size") for m in split_list(text) or [text]]
        # per_tensor is the same reducer with one tensor per bucket (message size 1).
        self.message_sizes = {"per_tensor": 1, **{f"bucketed_{format_count(m)}": m for m in sizes}}
        self.variants = tuple(self.message_sizes)

    def memory_bytes(self, size_bytes: int, world_size: int) -> int:
        # Gradients, their cached values, the expected averages and the flattened buckets, at 8 bytes per element.
        return 4 * sum(self.numels) * 8

    def setup(self, args: CollArgs, size_bytes: int) -> None:
        grads, args.expected = self.reference(args)
        args.input = [torch.empty_like(g) for g in grads]
        args.count = sum(self.numels)
        args.state = AllReduceBucketer(args.backend.all_reduce, args.world_size, self.message_sizes[args.variant])

    def reference(self, args: CollArgs) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        return average_reference(self.numels, args.rank, args.world_size, args.dtype, args.device)

    def issue(self, args: CollArgs, phase: str) -> None:
        for work in args.state.reduce(args.input):
            args.issue(work)

    def wrong(self, args: CollArgs, phase: str) -> int:
        return sum(count_wrong(grad, exp) for grad, exp in zip(args.input, args.expected))

    def bus_factor(self, world_size: int) -> float:
        return 2 * (world_size - 1) / world_size
