"""A recorded Call issued through commbench's own ops: the op's CollArgs set up with the exact
element counts the trace recorded, and the op's own calls and check. An op owns one collective
pattern, and its replay rule sits on its spec (ops/spec.py's Recorded: the names it issues again,
its S from the recorded counts, the variants that must split evenly); this module reads those
rules and says what a rank outside the call's group does (it sits the call out).

Each rank's input count is the recorded truth ("In msg nelems"): an all_gather's output is then n
times it, a reduce_scatter_base's shard 1/n of it; a scatter's is its output (the root's input is n
times it). A count the op cannot set up exactly is refused, never rounded.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from commbench.lazy import torch
from commbench.ops import load_op, registry, spec_of, specs
from commbench.ops.all_to_all import AllToAll
from commbench.ops.args import CollArgs
from commbench.ops.base import IssueOp, Op
from commbench.ops.rooted import RootedOp
from commbench.ops.spec import Point, Recorded
from commbench.replay.record import Call

if TYPE_CHECKING:
    from commbench.backends.base import Backend

PHASE = "comm"  # the phase every op replayed here has (the ops that have others are not replayed)


def rule(op: str) -> Recorded | None:
    """The op's replay rule (its spec's `recorded`: ops/spec.py), None for an op that replays nothing."""
    spec = spec_of(op)
    return None if spec is None else spec.recorded


@functools.cache
def recorded_names() -> dict[str, tuple[str, str]]:
    """Every recorded collective name a registered op issues again -> (op, variant)."""
    return {
        name: (spec.name, variant)
        for spec in specs()
        if spec.recorded is not None
        for name, variant in spec.recorded.names.items()
    }


def rooted(op: str) -> bool:
    """Whether the op has a root rank (a RootedOp: broadcast, reduce, gather, scatter)."""
    cls = registry().get(op)
    return cls is not None and issubclass(cls, RootedOp)


def s_elements(call: Call, group_size: int) -> int:
    """S of the call in elements on a group of group_size ranks (its op's rule)."""
    recorded = rule(call.op)
    return call.in_elems if recorded is None else recorded.s_elements(call.in_elems, call.out_elems, group_size)


def unsupported(call: Call) -> str | None:
    """Why the replay cannot issue this call through an op, or None."""
    if rule(call.op) is None:
        replayable = ", ".join(spec.name for spec in specs() if spec.recorded is not None)
        return f"no replay rule for op {call.op!r} (replayable: {replayable})"
    if rooted(call.op) and call.peer is None:
        return f"{call.op} needs its root, which the trace did not record"
    return None


def inexact(call: Call, group_size: int) -> str | None:
    """Why the call's counts cannot be set up exactly on a group of group_size ranks, or None;
    decided from the counts alone, so the launching process refuses before any rank starts."""
    k = group_size
    if call.op != "barrier" and s_elements(call, k) <= 0:
        return "it moves no elements"
    recorded = rule(call.op)
    if recorded is not None and call.variant in recorded.even and call.in_elems % k:
        return f"{call.in_elems} elements do not split evenly over its {k} ranks"
    uneven = call.op == "all_to_all" and call.variant == "uneven"
    if uneven and (len(call.splits) != k or any(len(row) != k for row in call.splits)):
        return f"its splits are not {k} x {k}"
    return None


def s_bytes(call: Call, group_size: int, element_size: int) -> int:
    """S of the call on a group of group_size ranks, in bytes."""
    return s_elements(call, group_size) * element_size


def op_options(call: Call) -> dict[str, Any]:
    """The options that make the op issue this call: its root, its tensors."""
    if rooted(call.op):
        return {"root": call.peer}
    if call.op == "grouped_all_gather":
        k = max(call.tensors, 1)
        return {"tensors": tuple(call.in_elems // k + (1 if i < call.in_elems % k else 0) for i in range(k))}
    return {}


class RecordedAllToAll(AllToAll):
    """all_to_all with the trace's splits instead of the seeded MoE ones (uneven only)."""

    def __init__(self, options: Mapping[str, Any] | None, splits: tuple[tuple[int, ...], ...]) -> None:
        super().__init__(options)
        self.recorded = [list(row) for row in splits]

    def splits(self, variant: str, world_size: int, count: int) -> list[list[int]]:
        if variant == "uneven" and self.recorded:
            return self.recorded
        return super().splits(variant, world_size, count)


def build_op(call: Call) -> Op:
    """The op instance that issues this call."""
    options = op_options(call)
    if call.op == "all_to_all":
        return RecordedAllToAll(options, call.splits)
    return load_op(call.op)(options)


class SitOut(IssueOp):
    """What a rank outside a call's group runs: nothing. It still joins the world's barrier and the
    exchange of samples, so the per-iteration max over ranks is the group's."""

    name = "sit_out"
    variants = ("none",)
    phases = (PHASE,)

    def setup(self, args: CollArgs, point: Point) -> None:
        args.count = 0

    def fill(self, args: CollArgs) -> None:
        pass

    def issue(self, args: CollArgs, phase: str) -> None:
        pass

    def wrong(self, args: CollArgs, phase: str) -> int:
        return 0


@dataclass
class Issued:
    """A call as this rank issues it: the op and its set-up arguments (SitOut where not a member)."""

    call: Call
    op: Op
    args: CollArgs
    s_bytes: int  # S on the call's group, the same on every rank


def set_up(
    call: Call,
    view: Backend | None,
    world: Backend,
    group_size: int,
    wait_objs: list | None = None,
) -> Issued:
    """Set the call up on this rank: `view` is the backend as the call's group sees it (None: this
    rank is not in the group). Raises ValueError when the op cannot hold the exact counts."""
    dtype = getattr(torch, call.dtype)
    element_size = torch.empty((), dtype=dtype).element_size()
    s = s_bytes(call, group_size, element_size)
    extra = {} if wait_objs is None else {"wait_objs": wait_objs}
    if view is None:
        args = CollArgs(backend=world, dtype=dtype, variant=call.variant, **extra)
        op: Op = SitOut()
        op.setup(args, Point.of_size(s))
        return Issued(call, op, args, s)
    op = build_op(call)
    if call.variant not in op.variants:
        raise ValueError(f"{call.op} has no variant {call.variant!r} (its variants: {', '.join(op.variants)})")
    args = CollArgs(backend=view, dtype=dtype, variant=call.variant, **extra)
    if (why := inexact(call, group_size)) is not None:
        raise ValueError(why)
    if call.op == "all_to_all" and call.variant == "uneven":
        op.setup(args, Point.of_size(s))  # the splits, as recorded: each rank sends its row
        return Issued(call, op, args, s)
    op.setup(args, Point.of_size(s))
    if (got := op.size_bytes(args, PHASE)) != s:
        raise ValueError(f"{call.op}/{call.variant} can hold {got} bytes, not the {s} the trace recorded")
    return Issued(call, op, args, s)


class Step(IssueOp):
    """A step's calls issued back to back in the job's order, each through its own op, completed
    together at the end of the sample (one measurement). Their wait objects share one list (the
    step's args.wait_objs), which the harness waits on; each call has its own buffers, as in the job."""

    name = "step"
    variants = ("sequence",)
    phases = (PHASE,)

    def __init__(self, issued: list[Issued]) -> None:
        super().__init__()
        self.issued = [i for i in issued if not isinstance(i.op, SitOut)]
        self.total_bytes = sum(i.s_bytes for i in issued)

    def setup(self, args: CollArgs, point: Point) -> None:
        args.count = 0

    def fill(self, args: CollArgs) -> None:
        for i in self.issued:
            i.op.fill(i.args)

    def before(self, args: CollArgs, phase: str) -> None:
        for i in self.issued:
            i.op.before(i.args, phase)

    def issue(self, args: CollArgs, phase: str) -> None:
        for i in self.issued:
            i.op.issue(i.args, phase)

    def wrong(self, args: CollArgs, phase: str) -> int:
        return sum(i.op.wrong(i.args, phase) for i in self.issued)

    def size_bytes(self, args: CollArgs, phase: str) -> int:
        return self.total_bytes

    def bus_factor(self, world_size: int) -> float | None:
        return None
