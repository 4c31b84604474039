"""The communication strategies of SyncBatchNorm: what each original sends, and how it merges.

Every strategy computes the same global statistics and gradient sums (docs/syncbn.md);
they differ only in the messages. The forward sends per-rank statistics and merges them; the
backward sums (sum_dy, sum_dy_xmu) over ranks. Where the original issues its calls async and then
waits on every wait object, so does the strategy here. Counts travel as the statistics' float
type, as in PyTorch: Horovod sends an int64 count, but a grouped gather of mixed types is not safe
everywhere (torch 2.13's Gloo coalesced all-gather of an int64 and a float32 tensor returns garbage).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import torch

from commbench.backends.base import Work
from commbench.syncbn.comm import Communicator
from commbench.syncbn.stats import GlobalStats, LocalStats, chan_merge, local_stats, merge_from_invstd, stat_dtype


def _wait_all(works: list[Work]) -> None:
    for work in works:
        work.wait()


def _gathered(comm: Communicator, parts: list[torch.Tensor]) -> torch.Tensor:
    """One flat all-gather of the concatenated parts; returns (world_size, total length)."""
    combined = torch.cat(parts)
    out = combined.new_empty(comm.world_size * combined.numel())
    comm.all_gather_flat(out, combined).wait()
    return out.view(comm.world_size, -1)


class Strategy(ABC):
    """One communication pattern: the forward's gather and merge, the backward's reduction.

    forward_calls/backward_calls and forward_bytes/backward_bytes describe the messages: S counts
    each call as nccl-tests does (an all-gather by its gathered output, an all-reduce by its buffer).
    """

    name: ClassVar[str]
    forward_calls: ClassVar[int]
    backward_calls: ClassVar[int]

    @abstractmethod
    def forward(self, comm: Communicator, xs: torch.Tensor, eps: float) -> GlobalStats:
        """Local statistics of the input xs (in its own dtype: local_stats accumulates half types in
        float32 without copying it), exchanged and merged over every rank."""

    def backward(
        self, comm: Communicator, sum_dy: torch.Tensor, sum_dy_xmu: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(sum_dy, sum_dy_xmu) summed over ranks; the default is one all-reduce of both (2C)."""
        combined = torch.cat([sum_dy, sum_dy_xmu])
        comm.all_reduce(combined).wait()
        return combined[: sum_dy.numel()], combined[sum_dy.numel() :]

    def forward_bytes(self, channels: int, world_size: int, stat_bytes: int) -> int:
        """Every gathering strategy gathers count, mean and a spread (2C+1 values) from every rank."""
        return (2 * channels + 1) * world_size * stat_bytes

    def backward_bytes(self, channels: int, world_size: int, stat_bytes: int) -> int:
        return 2 * channels * stat_bytes


class TorchStrategy(Strategy):
    """PyTorch >= 1.6: one all-gather of [mean, invstd, count], one all-reduce of [sum_dy, sum_dy_xmu]."""

    name = "torch"
    forward_calls, backward_calls = 1, 1

    def forward(self, comm: Communicator, xs: torch.Tensor, eps: float) -> GlobalStats:
        local = local_stats(xs)
        channels = xs.shape[1]
        rows = _gathered(comm, [local.mean, local.invstd(eps), local.count_tensor()])
        return merge_from_invstd(rows[:, 2 * channels], rows[:, :channels], rows[:, channels : 2 * channels], eps)


class TorchLegacyStrategy(Strategy):
    """PyTorch ~1.5: three async list all-gathers (count, mean, invstd) and two async all-reduces."""

    name = "torch_legacy"
    forward_calls, backward_calls = 3, 2

    def forward(self, comm: Communicator, xs: torch.Tensor, eps: float) -> GlobalStats:
        local = local_stats(xs)
        sent = [local.count_tensor(), local.mean, local.invstd(eps)]
        lists = [[torch.empty_like(t) for _ in range(comm.world_size)] for t in sent]
        _wait_all([comm.all_gather_list(out, t) for out, t in zip(lists, sent)])
        counts, means, invstds = (torch.stack(parts) for parts in lists)
        return merge_from_invstd(counts.view(-1), means, invstds, eps)

    def backward(
        self, comm: Communicator, sum_dy: torch.Tensor, sum_dy_xmu: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        sum_dy, sum_dy_xmu = sum_dy.clone(), sum_dy_xmu.clone()
        _wait_all([comm.all_reduce(sum_dy), comm.all_reduce(sum_dy_xmu)])
        return sum_dy, sum_dy_xmu


class ApexStrategy(TorchStrategy):
    """apex's optimized SyncBN: one all-gather of [mean, biased var, count] and a Welford (Chan) merge
    of the variances themselves, with no invstd round trip; one all-reduce backward."""

    name = "apex"

    def forward(self, comm: Communicator, xs: torch.Tensor, eps: float) -> GlobalStats:
        local = local_stats(xs)
        channels = xs.shape[1]
        rows = _gathered(comm, [local.mean, local.var, local.count_tensor()])
        return chan_merge(rows[:, 2 * channels], rows[:, :channels], rows[:, channels : 2 * channels])


class HorovodStrategy(TorchLegacyStrategy):
    """Horovod's SyncBatchNorm: three async flat allgathers (count, mean, invstd), two async allreduces."""

    name = "horovod"

    def forward(self, comm: Communicator, xs: torch.Tensor, eps: float) -> GlobalStats:
        sent, outs = self._messages(comm, local_stats(xs), eps)
        _wait_all([comm.all_gather_flat(out, t) for out, t in zip(outs, sent)])
        return self._merge(comm, outs, eps)

    @staticmethod
    def _messages(comm: Communicator, local: LocalStats, eps: float) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        sent = [local.count_tensor(), local.mean, local.invstd(eps)]
        return sent, [t.new_empty(t.numel() * comm.world_size) for t in sent]

    @staticmethod
    def _merge(comm: Communicator, outs: list[torch.Tensor], eps: float) -> GlobalStats:
        counts, means, invstds = (out.view(comm.world_size, -1) for out in outs)
        return merge_from_invstd(counts.view(-1), means, invstds, eps)


class HorovodGroupedStrategy(HorovodStrategy):
    """Horovod's messages as one grouped allgather and one grouped allreduce (hvd.grouped_* on
    Horovod, torch's coalescing manager on torch backends): what a grouped Horovod SyncBN would gain."""

    name = "horovod_grouped"
    forward_calls, backward_calls = 1, 1

    def forward(self, comm: Communicator, xs: torch.Tensor, eps: float) -> GlobalStats:
        sent, outs = self._messages(comm, local_stats(xs), eps)
        comm.all_gather_group(outs, sent).wait()
        return self._merge(comm, outs, eps)

    def backward(
        self, comm: Communicator, sum_dy: torch.Tensor, sum_dy_xmu: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        sum_dy, sum_dy_xmu = sum_dy.clone(), sum_dy_xmu.clone()
        comm.all_reduce_group([sum_dy, sum_dy_xmu]).wait()
        return sum_dy, sum_dy_xmu


class AllReduceStrategy(Strategy):
    """fairscale's experimental form: an async all-reduce of the count overlapped with the local sums,
    then one all-reduce of [mean, E[x^2]] weighted by n_j/N; var = E[x^2] - mean^2."""

    name = "allreduce"
    forward_calls, backward_calls = 2, 1

    def forward(self, comm: Communicator, xs: torch.Tensor, eps: float) -> GlobalStats:
        channels = xs.shape[1]
        count = xs.numel() // channels if channels else 0
        total = torch.full((1,), float(count), dtype=stat_dtype(xs.dtype), device=xs.device)
        pending = comm.all_reduce(total)
        # This rank's mean and E[x^2] = var + mean^2 from the shared statistics pass, not a pass of its
        # own over x^2 (an empty batch gives zeros, the weight-0 contribution it should make).
        local = local_stats(xs)
        moments = torch.cat([local.mean, torch.addcmul(local.var, local.mean, local.mean)])
        pending.wait()
        # Weighted by n_j / N, as fairscale weighs the means: the all-reduce sums them to the global moments.
        vec = moments.mul_(float(count)).div_(total)
        comm.all_reduce(vec).wait()
        mean, meansqr = vec[:channels], vec[channels:]
        # E[x^2] - mean^2 can round below zero when the variance is tiny next to the mean.
        var = (meansqr - mean.square()).clamp_min(0)
        return GlobalStats(round(total.item()), mean, var)

    def forward_bytes(self, channels: int, world_size: int, stat_bytes: int) -> int:
        return (1 + 2 * channels) * stat_bytes


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        TorchStrategy(),
        TorchLegacyStrategy(),
        ApexStrategy(),
        HorovodStrategy(),
        HorovodGroupedStrategy(),
        AllReduceStrategy(),
    )
}


def get_strategy(name: str) -> Strategy:
    """The strategy called name, or a ValueError listing the valid ones."""
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ValueError(
            f"unknown SyncBatchNorm strategy {name!r}; valid strategies: {', '.join(STRATEGIES)}"
        ) from None
