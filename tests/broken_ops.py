"""Deliberately broken ops: each does its collective correctly, then bumps one element of the
result on every rank, so the check must report one wrong element per rank. The CLI loads them as
`--op tests.broken_ops:Name`."""

from __future__ import annotations

from typing import Any

import torch

from commbench.ops.all_gather import AllGather
from commbench.ops.all_reduce import AllReduce
from commbench.ops.reduce_scatter_base import ReduceScatterBase
from commbench.run.harness import CollArgs, complete


def _bump(result: Any) -> None:
    """Add one to the last element of a tensor, or of the last tensor of a list."""
    tensor = result if torch.is_tensor(result) else result[-1]
    tensor.view(-1)[-1] += 1


class CorruptAllGather(AllGather):
    name = "corrupt_all_gather"

    def issue(self, args: CollArgs, phase: str) -> None:
        super().issue(args, phase)
        complete(args)
        _bump(args.output)


class CorruptReduceScatter(ReduceScatterBase):
    name = "corrupt_reduce_scatter_base"

    def issue(self, args: CollArgs, phase: str) -> None:
        super().issue(args, phase)
        complete(args)
        _bump(args.output)


class CorruptAllReduce(AllReduce):
    name = "corrupt_all_reduce"

    def issue(self, args: CollArgs, phase: str) -> None:
        super().issue(args, phase)
        complete(args)
        _bump(args.input)  # all_reduce is in place
