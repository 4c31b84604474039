"""Deliberately broken ops: each does its collective correctly, then bumps one element of the
result on every rank, so the check must report one wrong element per rank where that rank's result
is checked (BrokenBarrier instead does not wait). The CLI loads them as `--op tests.support.broken_ops:Name`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from commbench.ops.all_gather import AllGather
from commbench.ops.all_reduce import AllReduce
from commbench.ops.all_to_all import AllToAll
from commbench.ops.args import CollArgs, complete
from commbench.ops.barrier import Barrier
from commbench.ops.base import IssueOp, Op
from commbench.ops.broadcast import Broadcast
from commbench.ops.gather import Gather
from commbench.ops.reduce import Reduce
from commbench.ops.reduce_scatter_base import ReduceScatterBase
from commbench.ops.scatter import Scatter
from commbench.ops.sendrecv import SendRecv


def _bump(result: Any) -> None:
    """Add one to the last element of a tensor, or of the last tensor of a list."""
    tensor = result if torch.is_tensor(result) else result[-1]
    tensor.view(-1)[-1] += 1


def _corrupt(class_name: str, base: type[Op], name: str, result: Callable[[CollArgs], Any]) -> type[Op]:
    """A copy of base whose issue() completes the op, then bumps result(args) (nothing when None)."""

    def issue(self: Op, args: CollArgs, phase: str) -> None:
        base.issue(self, args, phase)
        complete(args)
        if (target := result(args)) is not None:
            _bump(target)

    # Named as the module attribute, so ranks can unpickle it and the CLI load it by name.
    return type(class_name, (IssueOp, base), {"name": name, "issue": issue, "__module__": __name__})


CorruptAllGather = _corrupt("CorruptAllGather", AllGather, "corrupt_all_gather", lambda a: a.output)
CorruptReduceScatter = _corrupt(
    "CorruptReduceScatter", ReduceScatterBase, "corrupt_reduce_scatter_base", lambda a: a.output
)
CorruptAllReduce = _corrupt("CorruptAllReduce", AllReduce, "corrupt_all_reduce", lambda a: a.input)  # in place
CorruptAllToAll = _corrupt("CorruptAllToAll", AllToAll, "corrupt_all_to_all", lambda a: a.output)
CorruptBroadcast = _corrupt("CorruptBroadcast", Broadcast, "corrupt_broadcast", lambda a: a.input)  # in place
# Every rank's tensor: the root's result is wrong, and the others' where the transport keeps them.
CorruptReduce = _corrupt("CorruptReduce", Reduce, "corrupt_reduce", lambda a: a.input)
# The root's result, and every other rank's input (which gather must leave untouched).
CorruptGather = _corrupt(
    "CorruptGather", Gather, "corrupt_gather", lambda a: a.output if a.output is not None else a.input
)
CorruptScatter = _corrupt("CorruptScatter", Scatter, "corrupt_scatter", lambda a: a.output)
# What a rank received; a rank that received nothing (sat the op out, or only sent: oneway) keeps its buffer.
CorruptSendRecv = _corrupt(
    "CorruptSendRecv",
    SendRecv,
    "corrupt_sendrecv",
    lambda a: a.output if a.state is not None and a.state[1] is not None else None,
)


class _Done:
    def wait(self) -> None:
        return None


class BrokenBarrier(IssueOp, Barrier):
    """A barrier that does not wait: every rank but the last leaves before the last one arrives."""

    name = "broken_barrier"

    def issue(self, args: CollArgs, phase: str) -> None:
        args.issue(_Done())


class RefusingAllGather(IssueOp, AllGather):
    """An all_gather whose `list` variant the transport refuses outright on every rank, as Gloo
    refuses some collectives on CUDA tensors: that variant must become an `unavailable` row."""

    name = "refusing_all_gather"

    def issue(self, args: CollArgs, phase: str) -> None:
        if args.variant == "list":
            raise RuntimeError("Gloo allgather: list form is not supported for this tensor type")
        super().issue(args, phase)


class RefusingAllToAll(IssueOp, AllToAll):
    """An all_to_all whose `uneven` variant the transport refuses on every rank in c10d's words for a
    method a backend lacks (torch 2.11's Gloo says them for alltoall): a refusal no table knows,
    read from its text as the fallback, must still be an `unavailable` row."""

    name = "refusing_all_to_all"

    def issue(self, args: CollArgs, phase: str) -> None:
        if args.variant == "uneven":
            raise RuntimeError("Backend gloo does not support alltoall")
        super().issue(args, phase)


class LateRefusingAllGather(IssueOp, AllGather):
    """An all_gather that the transport refuses on every rank from its third iteration on: with
    `-n 2 -w 1`, in its last round's block (after its first round, so not an `unavailable` row):
    the run fails, and the diagnosis calls it a refusal."""

    name = "late_refusing_all_gather"
    PASSING = 2  # the warm-up's iteration and the first round's

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self.issued = 0

    def issue(self, args: CollArgs, phase: str) -> None:
        self.issued += 1
        if self.issued > self.PASSING:
            raise RuntimeError("Backend gloo does not support allgather")
        super().issue(args, phase)
