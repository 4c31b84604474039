"""sendrecv: point-to-point transfers as pipeline parallelism issues them, through batch_isend_irecv.

`pair`: rank r exchanges with r xor 1 in both directions (with an odd n the last rank has no
partner and sits the op out). `ring`: every rank sends to r+1 and receives from r-1, in one batch.
Each transfer's wait object goes to the holder, so blocking and non-blocking modes time them as
they time any collective.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from commbench.lazy import torch
from commbench.ops.base import Call, CallsOp
from commbench.ops.memory import MemoryCase
from commbench.ops.spec import INPUT, UNIT_FACTOR, OpSpec, Point, Recorded, elements_for
from commbench.ops.values import chunk_temporaries, contribution

if TYPE_CHECKING:
    from commbench.backends.base import Backend
    from commbench.ops.args import CollArgs


def peers(variant: str, rank: int, world_size: int) -> tuple[int, int] | None:
    """(the rank this one sends to, the rank it receives from), or None when it sits the op out."""
    if variant == "pair":
        partner = rank ^ 1
        return (partner, partner) if partner < world_size else None
    return (rank + 1) % world_size, (rank - 1) % world_size


class SendRecv(CallsOp):
    """`count` elements sent and `count` received by every rank, as one batch of isend/irecv."""

    spec = OpSpec(
        name="sendrecv",
        summary="point-to-point: pair (r exchanges with r xor 1) or ring (r sends to r+1, receives from r-1)",
        s_definition="S = bytes one rank sends = count x element size",
        bus_factor=UNIT_FACTOR,
        variants=("pair", "ring"),
        recorded=Recorded({"send": "pair", "recv": "pair"}, INPUT, same_counts=False, peer=True),
    )

    def unavailable(self, variant: str, backend: Backend) -> str | None:
        if backend.world_size < 2:
            return "point-to-point needs at least 2 ranks"
        return backend.missing("send_recv")

    def memory_bytes(self, case: MemoryCase, point: Point) -> int:
        # What a rank sends (S) and what it receives (S).
        return (
            2 * point.size_bytes + case.transport("send_recv", point.size_bytes) + chunk_temporaries(point.size_bytes)
        )

    def setup(self, args: CollArgs, point: Point) -> None:
        args.count = elements_for(point.size_bytes, args.element_size, 1)
        args.state = peers(args.variant, args.rank, args.world_size)
        args.input = torch.empty(args.count, dtype=args.dtype, device=args.device)  # only read
        args.output = torch.empty(args.count, dtype=args.dtype, device=args.device)

    def fill(self, args: CollArgs) -> None:
        contribution(args.rank).write(args.input)
        if args.state is None:  # sitting out: the check expects its own values, untouched
            contribution(args.rank).write(args.output)
        else:
            args.output.zero_()

    def calls(self, args: CollArgs, phase: str) -> list[Call]:
        if args.state is None:  # sitting out
            return []
        to, source = args.state
        return [Call(args.backend.send_recv, ([(args.input, to)], [(args.output, source)]), batch=True)]

    def wrong(self, args: CollArgs, phase: str) -> int:
        source = args.rank if args.state is None else args.state[1]
        return contribution(source).wrong(args.output)

    def note(self, args: CollArgs) -> str:
        if args.variant == "pair" and args.world_size % 2:
            return f"rank {args.world_size - 1} has no partner (odd n = {args.world_size}) and sat the op out"
        return ""
