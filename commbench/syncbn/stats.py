"""The batch-norm statistics every strategy shares (docs/syncbn.md), in plain torch ops.

Per rank: a count n_j (values per channel), a mean m_j and a biased variance v_j per channel.
Ranks merge them with Chan's parallel form of Welford's update; an empty rank (n_j = 0) adds
nothing and is skipped, since its first merge would divide 0 by 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def stat_dtype(dtype: torch.dtype) -> torch.dtype:
    """Statistics are accumulated in float32 for half inputs (as the CUDA kernels do), else in the input's type."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def reduce_dims(x: torch.Tensor) -> list[int]:
    """Every dimension but the channel one (dim 1). Reducing over them keeps channels_last input uncopied."""
    return [0, *range(2, x.dim())]


def per_channel(v: torch.Tensor, ndim: int) -> torch.Tensor:
    """A (C,) vector shaped to broadcast against an (N, C, ...) input."""
    return v.view(1, -1, *([1] * (ndim - 2)))


@dataclass
class LocalStats:
    """One rank's statistics; mean and var are zeros for an empty batch (they carry no weight)."""

    count: int
    mean: torch.Tensor
    var: torch.Tensor  # biased: sum((x - mean)^2) / count

    def invstd(self, eps: float) -> torch.Tensor:
        return torch.rsqrt(self.var + eps)

    def count_tensor(self) -> torch.Tensor:
        """The count as a 1-element tensor of the statistics' type, ready to send beside them."""
        return torch.full((1,), float(self.count), dtype=self.mean.dtype, device=self.mean.device)


@dataclass
class GlobalStats:
    """The merged statistics over every rank: total count, mean and biased variance M2/N."""

    count: int
    mean: torch.Tensor
    var: torch.Tensor

    def invstd(self, eps: float) -> torch.Tensor:
        return torch.rsqrt(self.var + eps)

    def unbiased_var(self) -> torch.Tensor:
        """M2/(N-1), what the running variance tracks (global N)."""
        return self.var * (self.count / (self.count - 1))


def local_stats(xs: torch.Tensor) -> LocalStats:
    """Two-pass mean and biased variance per channel of xs (already in the statistics' type)."""
    channels = xs.shape[1]
    count = xs.numel() // channels if channels else 0
    if count == 0:
        zeros = xs.new_zeros(channels)
        return LocalStats(0, zeros, zeros.clone())
    dims = reduce_dims(xs)
    mean = xs.sum(dims) / count
    var = (xs - per_channel(mean, xs.dim())).square().sum(dims) / count
    return LocalStats(count, mean, var)


def chan_merge(counts: torch.Tensor, means: torch.Tensor, variances: torch.Tensor) -> GlobalStats:
    """Merge per-rank (n_j, m_j, v_j) rank by rank, in the order of the ranks (Chan et al.'s parallel update).

    counts is (W,), means and variances are (W, C). Returns the total count, mean and M2/N.
    """
    n = 0.0
    avg = torch.zeros_like(means[0])
    m2 = torch.zeros_like(means[0])
    for n_j, m_j, v_j in zip(counts.tolist(), means, variances):
        if n_j <= 0:
            continue
        f = 1.0 / (n + n_j)
        m2 += n_j * v_j + (avg - m_j).square() * (n * n_j * f)
        avg = (n * avg + n_j * m_j) * f
        n += n_j
    total = round(n)
    return GlobalStats(total, avg, m2 / n if n > 0 else m2)


def merge_from_invstd(counts: torch.Tensor, means: torch.Tensor, invstds: torch.Tensor, eps: float) -> GlobalStats:
    """PyTorch's and Horovod's merge (batch_norm_gather_stats_with_counts): they send invstd, so each
    rank's variance is recovered as 1/invstd^2 - eps before the same Chan merge."""
    return chan_merge(counts, means, invstds.reciprocal().square() - eps)


def check_enough_values(stats: GlobalStats, world_size: int, shape: torch.Size) -> None:
    """PyTorch's training-mode check, on the global count: one value per channel has no variance."""
    if stats.count <= 1:
        raise ValueError(
            f"Expected more than 1 value per channel when training, got {stats.count} over all {world_size} "
            f"rank(s) (input size {list(shape)} on this rank)"
        )
