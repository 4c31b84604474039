"""One fake transport for every test that needs a backend without a process group, and a fake op
whose iterations move its clock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch

from commbench.backends.base import Backend
from commbench.ops.args import CollArgs
from commbench.ops.base import IssueOp
from commbench.ops.spec import BusFactor, OpSpec, Point


class FakeBackend(Backend):
    """Rank `rank` of a world of `world_size`, with no process group behind it.

    Ops can set up, fill and check their buffers on it (S, values, variants); the control plane is
    this rank's alone (a barrier returns at once, a gather of objects is [obj]); its clock moves only
    when a test advances `now`, so a runner driven by it sees exactly the times the test chose. Its
    collectives raise: a test that reaches one has left what this fake is for.
    `reduce_keeps_non_root` is the transport property the reduce op's check depends on.
    """

    name = "fake"

    def __init__(self, rank: int = 0, world_size: int = 1, *, reduce_keeps_non_root: bool = False) -> None:
        super().__init__()
        self.rank, self.world_size = rank, world_size
        self.reduce_keeps_non_root = reduce_keeps_non_root  # type: ignore[misc]
        self.now = 0.0

    def init(self, timeout_s: float, launch: Any) -> None: ...
    def close(self) -> None: ...
    def version(self) -> str:
        return "fake"

    def all_gather_flat(self, output: torch.Tensor, input: torch.Tensor) -> Any:
        raise AssertionError("no collective runs on the fake backend")

    all_gather_list = reduce_scatter_flat = reduce_scatter_list = all_reduce = all_gather_flat  # type: ignore[assignment]

    def barrier(self) -> None: ...
    def all_gather_object(self, obj: Any) -> list[Any]:
        return [obj]

    def clock(self) -> float:
        return self.now

    def host_clock(self) -> Callable[[], float]:
        return self.clock  # the fake clock, on its CPU device too


TICK_S = 2.0**-13


class Recording(IssueOp):
    """An op whose every iteration advances the fake clock by 2^-13 s x (1 + S / 1 KiB), times a factor
    that `slow` may set per (variant, size, visit); every iteration is logged. Powers of two keep
    the fake clock's arithmetic exact."""

    spec = OpSpec(
        name="recording",
        summary="records the order of its iterations",
        s_definition="S = size",
        bus_factor=BusFactor("1", lambda n: 1.0),
        variants=("a", "b"),
    )
    log: ClassVar[list[tuple[str, int]]] = []
    slow: ClassVar[dict[tuple[str, int, int], float]] = {}

    def setup(self, args: CollArgs, point: Point) -> None:
        args.count = point.size_bytes // 4
        args.state = {"visit": -1, "size": point.size_bytes}

    def fill(self, args: CollArgs) -> None: ...

    def issue(self, args: CollArgs, phase: str) -> None:
        key = (args.variant, args.state["size"])
        visit = args.state["visit"]
        self.log.append(key)
        factor = self.slow.get((*key, visit), 1.0)
        args.backend.now += TICK_S * (1 + args.state["size"] / 1024) * factor

    def before(self, args: CollArgs, phase: str) -> None: ...

    def wrong(self, args: CollArgs, phase: str) -> int:
        return 0
