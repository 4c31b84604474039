"""What the gradient-step ops share: a training step's gradients as a fixed workload (`--tensors`).

Values are small integers computed from (rank, tensor, flat index) alone, so the expected results
are derived independently of any bucketing bookkeeping.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from commbench.ops.base import IssueOp
from commbench.ops.options import OpOption, Tensors
from commbench.ops.spec import Point
from commbench.ops.values import Values
from commbench.units import TENSORS_SYNTAX, format_size

if TYPE_CHECKING:
    from commbench.ops.args import CollArgs


def transformer_gradients(layers: int = 2, width: int = 256, vocab: int = 8191) -> tuple[int, ...]:
    """Element counts of a small transformer's parameters, in the order backward produces them.

    The odd vocabulary (8191, prime) and the 1-element logit scale give tensors that are not
    multiples of common world sizes, so padding is always exercised.
    """
    per_layer = (
        *(width, width),  # layer norm 1
        *(3 * width * width, 3 * width),  # attention in-projection
        *(width * width, width),  # attention out-projection
        *(width, width),  # layer norm 2
        *(4 * width * width, 4 * width),  # feed-forward up
        *(4 * width * width, width),  # feed-forward down
    )
    model = (vocab * width, *per_layer * layers, width, width, 1)  # embedding, layers, final norm, logit scale
    return tuple(reversed(model))


DEFAULT_GRADIENTS = transformer_gradients()
DEFAULT_GRADIENTS_TEXT = (
    f"a 2-layer, width-256 transformer: {len(DEFAULT_GRADIENTS)} tensors, {sum(DEFAULT_GRADIENTS) / 1e6:.1f}M elements"
)
TENSORS = OpOption(
    "--tensors",
    f"The tensors each rank contributes, in elements: {TENSORS_SYNTAX} (K, M, G are 1024 powers). "
    "grouped_all_gather gathers them together (default: SyncBN's 1,C,C with C swept from the sizes); "
    f"bucketed_reduce_scatter and bucketed_all_reduce reduce them as one gradient step (default: {DEFAULT_GRADIENTS_TEXT}).",
    Tensors(),  # no default of its own: each op that reads it has its own
)


def padded(numel: int, world_size: int) -> int:
    """numel rounded up to a multiple of the world size (FSDP pads flattened gradients so)."""
    return -(-numel // world_size) * world_size


def gradient_values(rank: int, tensor: int, numel: int) -> Values:
    """Rank r's flattened gradient k at flat index i: small integers, zeros in the padding (i >= numel)."""
    return Values(lambda i: ((i + 7 * tensor) % 13 + 1 + rank % 3) * (i < numel), largest=16)


class GradientStep(IssueOp):
    """An op whose one iteration reduces the whole gradient workload; S is the workload, one size."""

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.numels: tuple[int, ...] = self.value(TENSORS) or DEFAULT_GRADIENTS

    def points(self, requested: Sequence[int]) -> list[Point]:
        # A fixed workload: S is its size, whatever was requested.
        tensors = f"{len(self.numels)} tensor{'s' if len(self.numels) > 1 else ''}"
        return [Point(f"{tensors}, {format_size(sum(self.numels))} elements", 0)]

    def fill(self, args: CollArgs) -> None:
        for i, (numel, grad) in enumerate(zip(self.numels, args.input)):
            gradient_values(args.rank, i, numel).write(grad)
        for out in args.output or []:
            out.zero_()
