"""all_to_all: rank r sends a chunk to every rank p and receives one from every rank q.

`single` and `list` split each rank's count elements equally (all_to_all_single, all_to_all of n
tensors). `uneven` splits them as mixture-of-experts token routing does: every rank routes the same
number of elements, but some destinations (experts) are more popular than others, so ranks receive
unequal totals. The splits are drawn from a seeded distribution (uneven_splits), identical on
every rank and every run.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from commbench.lazy import torch
from commbench.ops.base import Call, CallsOp
from commbench.ops.cost import Cost, lg
from commbench.ops.memory import MemoryCase
from commbench.ops.options import Number, OpOption
from commbench.ops.spec import GATHER_FACTOR, INPUT, OpSpec, Point, Recorded, elements_for
from commbench.ops.values import Values, chunk_temporaries

if TYPE_CHECKING:
    from commbench.backends.base import Backend
    from commbench.ops.args import CollArgs

SPLITS_SEED = 0
IMBALANCE = OpOption(
    "--imbalance",
    "all_to_all uneven: the skew of the per-peer splits, the sigma of log-normal destination weights; "
    "0 splits evenly, 0.5 is moderate (on 2-8 ranks the busiest receives 1.4-1.9x the mean), 1 is strong.",
    Number(0.0, "the skew of the uneven splits, 0 (even) or more, e.g. 0.5"),
    default=0.5,
)


def uneven_splits(world_size: int, per_rank: int, imbalance: float, seed: int = SPLITS_SEED) -> list[list[int]]:
    """splits[src][dst]: the elements rank src sends to rank dst; every row sums to per_rank exactly.

    As MoE routing: destination d's popularity z_d is shared by every sender (a popular expert is
    popular from every rank), with some per-sender jitter e_sd: weight = exp(imbalance * (z_d + e_sd / 2)),
    z and e standard normal draws of random.Random(seed). A row is its weights scaled to per_rank and
    rounded to whole elements by largest remainder (ties to the lower rank), so the realised total
    each rank sends is exactly per_rank. Pure Python: the same on every rank, host and version.
    """
    rng = random.Random(seed)
    popularity = [rng.gauss(0.0, 1.0) for _ in range(world_size)]
    splits = []
    for _src in range(world_size):
        weights = [math.exp(imbalance * (z + rng.gauss(0.0, 1.0) / 2)) for z in popularity]
        exact = [per_rank * w / sum(weights) for w in weights]
        row = [math.floor(x) for x in exact]
        by_remainder = sorted(range(world_size), key=lambda d: (row[d] - exact[d], d))
        for d in by_remainder[: per_rank - sum(row)]:
            row[d] += 1
        splits.append(row)
    return splits


def receive_imbalance(splits: list[list[int]]) -> float:
    """The largest total a rank receives over the mean (1 for even splits), MoE's imbalance measure."""
    received = [sum(column) for column in zip(*splits)]
    mean = sum(received) / len(received)
    return max(received) / mean if mean else 1.0


@dataclass(frozen=True)
class Routing:
    """Who sends how much to whom: the whole matrix, and this rank's row (send) and column (receive)."""

    splits: list[list[int]]
    send: list[int]
    receive: list[int]


def routed(source: int, destination: int) -> Values:
    """The chunk source sends to destination, at index i: (3 source + 5 destination + i) % 13 + 1,
    small integers exact in every dtype."""
    return Values(lambda i: (3 * source + 5 * destination + i) % 13 + 1, period=13)


class AllToAll(CallsOp):
    """single (all_to_all_single), list (all_to_all of n tensors), uneven (all_to_all_single with MoE-like splits)."""

    spec = OpSpec(
        name="all_to_all",
        summary="rank r sends chunk p of its count elements to rank p; uneven splits them as MoE routing "
        "does: seeded log-normal destination popularity shared by all senders, skew --imbalance",
        s_definition="S = bytes each rank sends in total = count x element size (count = n x per-peer count; "
        "uneven: the realised total of the rank's splits)",
        bus_factor=GATHER_FACTOR,
        variants=("single", "list", "uneven"),
        recorded=Recorded(
            {
                "alltoall": "list",
                "all_to_all": "single",
                "alltoall_base": "single",
                "all_to_allv": "single",
                "alltoallv": "single",
            },
            INPUT,
            even=("single", "list"),
            same_counts=False,
        ),
        baseline="single",
        options=(IMBALANCE,),
        cost=Cost(
            ring=lambda p: (p - 1, (p - 1) / p),  # pairwise exchange
            tree=lambda p: (lg(p), lg(p) / 2),  # Bruck
        ),
    )

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.imbalance: float = self.value(IMBALANCE)

    def unavailable(self, variant: str, backend: Backend) -> str | None:
        return backend.missing("all_to_all_list" if variant == "list" else "all_to_all_single")

    def splits(self, variant: str, world_size: int, count: int) -> list[list[int]]:
        if variant == "uneven":
            return uneven_splits(world_size, count, self.imbalance)
        return [[count // world_size] * world_size for _ in range(world_size)]

    def memory_bytes(self, case: MemoryCase, point: Point) -> int:
        # What a rank sends (S) and what it receives: S for even splits, up to S x the realised
        # imbalance for uneven ones. Checked against values computed chunk by chunk.
        s = point.size_bytes
        received = int(s * receive_imbalance(self.splits(case.variant, case.world_size, max(s, 1))))
        call = "all_to_all_list" if case.variant == "list" else "all_to_all_single"
        return s + received + case.transport(call, max(s, received)) + chunk_temporaries(max(s, received))

    def setup(self, args: CollArgs, point: Point) -> None:
        n, r = args.world_size, args.rank
        splits = self.splits(args.variant, n, elements_for(point.size_bytes, args.element_size, n))
        args.state = route = Routing(splits, splits[r], [row[r] for row in splits])
        args.count = sum(route.send)  # what this rank sends: the requested count, or a subclass's splits
        send = torch.empty(args.count, dtype=args.dtype, device=args.device)
        receive = torch.empty(sum(route.receive), dtype=args.dtype, device=args.device)
        if args.variant == "list":
            args.input, args.output = list(send.split(route.send)), list(receive.split(route.receive))
        else:
            args.input, args.output = send, receive

    def fill(self, args: CollArgs) -> None:
        route: Routing = args.state
        for peer, chunk in enumerate(self._chunks(args.input, route.send)):
            routed(args.rank, peer).write(chunk)
        for out in self._chunks(args.output, route.receive):
            out.zero_()

    def calls(self, args: CollArgs, phase: str) -> list[Call]:
        backend = args.backend
        if args.variant == "list":
            return [Call(backend.all_to_all_list, (args.output, args.input))]
        if args.variant == "uneven":
            route: Routing = args.state
            return [Call(backend.all_to_all_single, (args.output, args.input, route.receive, route.send))]
        return [Call(backend.all_to_all_single, (args.output, args.input))]

    def wrong(self, args: CollArgs, phase: str) -> int:
        route: Routing = args.state
        return sum(
            routed(peer, args.rank).wrong(chunk) for peer, chunk in enumerate(self._chunks(args.output, route.receive))
        )

    @staticmethod
    def _chunks(buffer: Any, splits: list[int]) -> list[Any]:
        """A send or receive buffer as its per-peer chunks (the list variant's tensors are those already)."""
        return list(buffer.split(splits)) if torch.is_tensor(buffer) else list(buffer)

    def note(self, args: CollArgs) -> str:
        if args.variant != "uneven":
            return ""
        return (
            f"splits seed {SPLITS_SEED}, --imbalance {self.imbalance:g}: "
            f"max received / mean = {receive_imbalance(args.state.splits):.2f}"
        )
