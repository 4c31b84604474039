"""Ops that misbehave on purpose, loaded as `--op tests.support.plugins:Name` to test failure handling.

Each hangs from the first collective at or above 1 KiB, so the 8-byte case completes and its rows
must survive the failure.
"""

from __future__ import annotations

import os
import threading

import torch

from commbench.ops.all_gather import AllGather
from commbench.ops.args import CollArgs
from commbench.ops.base import IssueOp
from commbench.ops.spec import Point

HANG_FROM_BYTES = 1024


def _hangs(args: CollArgs) -> bool:
    return args.count * args.element_size >= HANG_FROM_BYTES


def block_forever() -> None:
    threading.Event().wait()


class HangOnRank1(IssueOp, AllGather):
    """all_gather (async wait objects) that rank 1 never issues: rank 0 waits in wait()."""

    name = "hang_on_rank1"
    variants = ("flat",)

    def issue(self, args: CollArgs, phase: str) -> None:
        if args.rank == 1 and _hangs(args):
            block_forever()
        super().issue(args, phase)


class HangOnRank1Coalesced(IssueOp, AllGather):
    """Two all_gathers fused into one wait object by the coalescing manager; rank 1 never issues them."""

    name = "hang_on_rank1_coalesced"
    variants = ("flat",)

    def unavailable(self, variant, backend):
        return backend.group_unavailable()

    def setup(self, args: CollArgs, point: Point) -> None:
        super().setup(args, point)
        args.state = torch.empty_like(args.output)  # the second gather's output

    def issue(self, args: CollArgs, phase: str) -> None:
        if args.rank == 1 and _hangs(args):
            block_forever()
        args.issue(args.backend.all_gather_group([args.output, args.state], [args.input, args.input]))


class NeverCompletes(IssueOp, AllGather):
    """Every rank issues the all_gather, then hands back a wait object that never completes.

    No torch timeout covers a wait path like this one; only commbench's watchdog ends it.
    """

    name = "never_completes"
    variants = ("flat",)

    class _Stuck:
        def wait(self) -> None:
            block_forever()

    def issue(self, args: CollArgs, phase: str) -> None:
        super().issue(args, phase)
        if _hangs(args):
            args.issue(self._Stuck())


# The file TakesTheOutput creates: the output rank 0 checked, as another run would take it.
TAKE_ENV = "COMMBENCH_TEST_TAKE_OUTPUT"


class TakesTheOutput(AllGather):
    """all_gather whose world check, run by every rank while the ranks agree (after rank 0 checked
    that its output is free), creates that output on rank 0: another run taking the name between
    rank 0's check and its exclusive create, as two runs started in the same second once did."""

    name = "takes_the_output"
    variants = ("flat",)

    def world_error(self, world_size: int) -> str | None:
        if os.environ.get("RANK") == "0" and (path := os.environ.get(TAKE_ENV)):
            open(path, "x").close()  # created empty: the other run's header is on its way
        return None
