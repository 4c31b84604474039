"""What the bucketed ops share: a training step's gradients as a fixed workload (`--tensors`).

Values are small integers computed from (rank, tensor, flat index) alone, so the expected results
are derived independently of any bucketing bookkeeping.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Mapping, Sequence

import torch

from commbench.harness import CollArgs
from commbench.ops.base import Op
from commbench.ops.options import tensors_option
from commbench.workload import DEFAULT_GRADIENTS


def padded(numel: int, world_size: int) -> int:
    """numel rounded up to a multiple of the world size (FSDP pads flattened gradients so)."""
    return -(-numel // world_size) * world_size


def indices(start: int, stop: int, device: torch.device) -> torch.Tensor:
    return torch.arange(start, stop, dtype=torch.int32, device=device)  # int32: half the memory traffic


def gradient_values(rank: int, tensor: int, numel: int, index: torch.Tensor) -> torch.Tensor:
    """Rank r's flattened gradient k at these flat indices: small integers, zeros in the padding (index >= numel)."""
    return ((index + 7 * tensor) % 13 + 1 + rank % 3) * (index < numel)


class GradientStep(Op):
    """An op whose one iteration reduces the whole gradient workload; S is the workload, one size."""

    def __init__(self, options: Mapping[str, str] | None = None) -> None:
        super().__init__(options)
        self.numels = tensors_option(self.options, DEFAULT_GRADIENTS)

    def sizes(self, requested: Sequence[int]) -> Sequence[int]:
        return list(requested[:1])  # a fixed workload: S is its size, whatever was requested

    @abstractmethod
    def reference(self, args: CollArgs) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """This rank's gradients before a step, and the results expected after it (cached per dtype)."""

    def fill(self, args: CollArgs) -> None:
        grads, _ = self.reference(args)
        for grad, values in zip(args.input, grads):
            grad.copy_(values)
        for out in args.output or []:
            out.zero_()
