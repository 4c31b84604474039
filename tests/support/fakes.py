"""One fake transport for every test that needs a backend without a process group."""

from __future__ import annotations

from typing import Any

import torch

from commbench.backends.base import Backend


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
