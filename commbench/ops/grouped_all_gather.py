"""grouped_all_gather: K small tensors gathered together, four ways (docs/ops.md).

The default K tensors are SyncBatchNorm's statistics (count, mean, invstd): shapes (1, C, C), with
C derived from the requested size. Every variant ends with, for each tensor k, an (n, numel_k)
result whose row r is rank r's tensor k.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from commbench.lazy import torch
from commbench.ops.base import Call, CallsOp
from commbench.ops.gradients import TENSORS
from commbench.ops.memory import MemoryCase
from commbench.ops.spec import GATHER_FACTOR, GATHERED, OpSpec, Point, Recorded
from commbench.ops.values import Values, chunk_temporaries

if TYPE_CHECKING:
    from commbench.backends.base import Backend
    from commbench.ops.args import CollArgs

MAX_CHANNELS = 4096  # the widest SyncBatchNorm layers in common models; keeps the default sweep short


def channels_for(size_bytes: int, element_size: int, world_size: int) -> int:
    """C such that the gathered mean and invstd (2C elements per rank) fill about size_bytes, in [1, 4096]."""
    return min(MAX_CHANNELS, max(1, size_bytes // (2 * element_size * world_size)))


def stat_values(rank: int, tensor: int) -> Values:
    """Rank r's tensor k: small integers, exact in every dtype, distinct across ranks and tensors."""
    return Values(lambda j: (j + 3 * rank + 5 * tensor) % 13 + 1, period=13)


class GroupedAllGather(CallsOp):
    """separate (K async all_gathers), concat (one all_gather of the packed tensors), coalesced
    (torch's coalescing manager) and grouped (Horovod's grouped_allgather)."""

    spec = OpSpec(
        name="grouped_all_gather",
        summary="K small tensors gathered together, default SyncBN's (1, C, C) with C = S / (2 x element size x n) "
        "up to 4096, or --tensors",
        s_definition="S = total gathered bytes over the K tensors = sum of per-rank elements x element size x n",
        bus_factor=GATHER_FACTOR,
        variants=("separate", "concat", "coalesced", "grouped"),
        recorded=Recorded(
            dict.fromkeys(
                ("allgather_into_tensor_coalesced", "all_gather_into_tensor_coalesced", "allgather_coalesced"),
                "coalesced",
            ),
            GATHERED,
        ),
        baseline="separate",
        workload_knobs="--max-bytes, --sizes or --tensors",
        options=(TENSORS,),
    )

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.numels: tuple[int, ...] | None = self.value(TENSORS)  # None: the SyncBN shapes, C swept

    def unavailable(self, variant: str, backend: Backend) -> str | None:
        if variant not in ("coalesced", "grouped"):
            return None
        if backend.grouping != variant:
            how = {
                "coalesced": "torch's coalescing manager (gloo, nccl)",
                "grouped": "Horovod's grouped_allgather (--backend horovod)",
            }
            return f"needs {how[variant]}; the {backend.name} backend groups collectives as {backend.grouping or 'nothing'}"
        return backend.group_unavailable()

    def points(self, requested: Sequence[int]) -> list[Point]:
        if self.numels:  # a fixed --tensors workload: one point
            return [Point(f"{len(self.numels)} tensors", 0)]
        return super().points(requested)

    def memory_bytes(self, case: MemoryCase, point: Point) -> int:
        # Inputs, outputs (n x), concat's packed input, and the transport's copies for the gathers in flight.
        numels = self._numels(point, case.element_size, case.world_size)
        n, e = case.world_size, case.element_size
        mine, gathered = sum(numels) * e, n * sum(numels) * e
        if case.variant == "separate":  # one gather per tensor: the transport may copy any of them
            copies = case.transport("all_gather_flat", n * max(numels) * e, len(numels) * case.window)
        elif case.variant == "concat":
            copies = mine * case.window + case.transport("all_gather_flat", gathered)
        else:
            copies = case.transport("all_gather_group", gathered)
        return mine + gathered + copies + chunk_temporaries(gathered)

    def setup(self, args: CollArgs, point: Point) -> None:
        n, dtype, device = args.world_size, args.dtype, args.device
        numels = self._numels(point, args.element_size, n)
        args.input = [torch.empty(k, dtype=dtype, device=device) for k in numels]
        if args.variant == "concat":  # one gathered buffer, split back into views (PyTorch's SyncBN)
            args.state = torch.empty(n, sum(numels), dtype=dtype, device=device)
            args.output = list(args.state.split(numels, dim=1))
        else:
            args.output = [torch.empty(n, k, dtype=dtype, device=device) for k in numels]
        args.count = n * sum(numels)

    def _numels(self, point: Point, element_size: int, world_size: int) -> list[int]:
        """Elements per rank of each tensor: --tensors, or SyncBN's (1, C, C) statistics."""
        if self.numels:
            return list(self.numels)
        c = channels_for(point.size_bytes, element_size, world_size)
        return [1, c, c]

    def fill(self, args: CollArgs) -> None:
        for i, t in enumerate(args.input):
            stat_values(args.rank, i).write(t)
        for out in [args.state] if args.variant == "concat" else args.output:
            out.zero_()

    def calls(self, args: CollArgs, phase: str) -> list[Call] | None:
        backend = args.backend
        if args.variant == "separate":
            return [Call(backend.all_gather_flat, (out.view(-1), t)) for out, t in zip(args.output, args.input)]
        if args.variant == "concat":
            return None  # the concatenation is part of the variant's time: issue() makes it every iteration
        # coalesced or grouped: the backend's one grouped operation
        return [Call(backend.all_gather_group, ([out.view(-1) for out in args.output], args.input))]

    def issue(self, args: CollArgs, phase: str) -> None:
        if args.variant == "concat":
            args.issue(args.backend.all_gather_flat(args.state.view(-1), torch.cat(args.input)))
        else:
            super().issue(args, phase)

    def wrong(self, args: CollArgs, phase: str) -> int:
        # Row r of gathered tensor k is rank r's tensor k.
        return sum(stat_values(r, i).wrong(row) for i, out in enumerate(args.output) for r, row in enumerate(out))
