"""Every registered op's S and bus factor as nccl-tests defines them, and options that keep its
workload small: one row per op, which tests/ops/test_s_and_bus_factor.py holds to the registry."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from commbench.ops.args import CollArgs


def listed(x: Any) -> list[Any]:
    """A tensor, a list of tensors or None, as a list of tensors."""
    return [] if x is None else [x] if torch.is_tensor(x) else list(x)


def elements(x: Any) -> int:
    return sum(t.numel() for t in listed(x))


def _syncbn_bytes(args: CollArgs, phase: str) -> int:
    """The statistics (float64 for float64 inputs, else float32): the forward gathers count, mean and
    a spread (2C+1 values) from every rank, or all-reduces them once (allreduce); the backward
    all-reduces 2C values."""
    stat = 8 if args.dtype == torch.float64 else 4
    c, n = args.count, args.world_size
    forward = (2 * c + 1) * stat * (1 if args.variant == "allreduce" else n)
    backward = 2 * c * stat
    return {"forward": forward, "backward": backward, "forward_backward": forward + backward}[phase]


@dataclass(frozen=True)
class Row:
    s_elements: Callable[[CollArgs], int] | None  # S in elements of the dtype; None: s_bytes says it
    factor: Callable[[int], float] | None  # busbw = algbw x factor(n); None: latency only, no bandwidth
    follows_size: bool = True  # S is the requested size, to a whole element per rank
    options: dict[str, str] | None = None
    s_bytes: Callable[[CollArgs, str], int] | None = None


def gathered(n: int) -> float:
    return (n - 1) / n


def reduced(n: int) -> float:
    return 2 * (n - 1) / n


def unit(n: int) -> float:
    return 1.0


# Sizes of uneven gradients, so that a reduce-scatter pads them to a multiple of n.
TENSORS = {"tensors": "5,5,5,7,1,33,33,4,300"}

TABLE: dict[str, Row] = {
    "all_gather": Row(lambda a: elements(a.output), gathered),
    "reduce_scatter_base": Row(lambda a: elements(a.input), gathered),  # in place, the output is a view of it
    "all_reduce": Row(lambda a: elements(a.input), reduced),
    "all_to_all": Row(lambda a: elements(a.input), gathered),
    "broadcast": Row(lambda a: elements(a.input), unit),
    "reduce": Row(lambda a: elements(a.input), unit),
    "gather": Row(lambda a: elements(a.input) * a.world_size, gathered),
    "scatter": Row(lambda a: elements(a.output) * a.world_size, gathered),
    "sendrecv": Row(lambda a: elements(a.output), unit),
    "barrier": Row(lambda a: 0, None, follows_size=False),
    "grouped_all_gather": Row(lambda a: elements(a.input) * a.world_size, gathered, follows_size=False),
    # Every rank's shard of every gradient, padded to a multiple of n: the padded workload.
    "bucketed_reduce_scatter": Row(lambda a: elements(a.output) * a.world_size, gathered, False, TENSORS),
    "bucketed_all_reduce": Row(lambda a: elements(a.input), reduced, False, TENSORS),  # not padded
    "sync_bn": Row(None, unit, False, {"channels": "8", "batch": "2", "spatial": "1"}, _syncbn_bytes),
}
