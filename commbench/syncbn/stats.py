"""The batch-norm statistics every strategy shares (docs/syncbn.md), in a few torch kernels.

Per rank: a count n_j (values per channel), a mean m_j and a biased variance v_j per channel, from
the fastest exact statistics pass the device has (local_stats). Ranks merge them with Chan's
parallel form of Welford's update, summed over ranks at once: N = sum n_j,
mean = sum n_j m_j / N, M2 = sum n_j v_j + sum n_j (m_j - mean)^2.
An empty rank (n_j = 0) sends zeros (finite), so its weight 0 makes it add exactly nothing.
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


def _fused_kernel_is_faster(x: torch.Tensor) -> bool:
    """Whether torch's batch-norm statistics kernel beats two vectorised reductions on x.

    Off the CPU it is a single Welford pass. On the CPU it is vectorised where the channels are the
    innermost dimension (channels_last, 2D; stride 1) and for half types; but for float32/float64
    with the channels outside (NCHW) it runs a scalar double-precision loop per channel, 3-6x slower
    than a sum and a sum of squared deviations (both vectorised, exact to the type's precision).
    """
    return x.device.type != "cpu" or x.dtype in (torch.float16, torch.bfloat16) or x.stride(1) == 1


# Elements of x per temporary in the two-pass statistics (2 MiB of float32): one slice of the batch
# at a time, the squared deviations stay in cache, and the allocator reuses the block instead of
# faulting fresh pages in for a batch-sized temporary (3x slower at (16, 1024, 28, 28)).
_TWO_PASS_CHUNK = 1 << 19


def _two_pass(x: torch.Tensor, count: int) -> LocalStats:
    """The mean from one vectorised sum, then the sum of squared deviations from it."""
    dims = reduce_dims(x)
    mean = x.sum(dims).div_(count)
    centre = per_channel(mean, x.dim())
    m2: torch.Tensor | None = None
    for part in x.split(max(1, _TWO_PASS_CHUNK // (x[0].numel() or 1))):
        part_m2 = (part - centre).square_().sum(dims)
        m2 = part_m2 if m2 is None else m2.add_(part_m2)
    assert m2 is not None  # count > 0, so x has a batch
    return LocalStats(count, mean, m2.div_(count))


def local_stats(x: torch.Tensor) -> LocalStats:
    """Mean and biased variance per channel of x (any dtype) in the statistics' type.

    Both forms read x where it lies: channels_last stays uncopied, and a half input is never copied
    to float32. The fused kernel is torch.batch_norm_update_stats, the statistics kernel of torch's
    own BatchNorm (CPU and CUDA); given float32 running buffers it accumulates a half input in
    float32 and returns float32 statistics (the buffers are stand-ins, momentum 0, dropped). Where it
    is slow (see _fused_kernel_is_faster) the statistics are two-pass instead. An empty batch gives
    zeros (the kernel rejects it).
    """
    channels = x.shape[1]
    count = x.numel() // channels if channels else 0
    dtype = stat_dtype(x.dtype)
    if count == 0:
        zeros = x.new_zeros(channels, dtype=dtype)
        return LocalStats(0, zeros, zeros.clone())
    if not _fused_kernel_is_faster(x):
        return _two_pass(x, count)
    if dtype == x.dtype:
        mean, var = torch.batch_norm_update_stats(x, None, None, 0.0)
    else:
        stand_in = torch.zeros(2, channels, dtype=dtype, device=x.device)
        mean, var = torch.batch_norm_update_stats(x, stand_in[0], stand_in[1], 0.0)
    return LocalStats(count, mean, var)


def chan_merge(counts: torch.Tensor, means: torch.Tensor, variances: torch.Tensor) -> GlobalStats:
    """Merge per-rank (n_j, m_j, v_j) over all ranks at once (Chan et al.'s parallel merge).

    counts is (W,), means and variances are (W, C), all on the statistics' device. With weights
    w_j = n_j / N, two matrix-vector products merge the ranks: mean = sum w_j m_j and M2/N =
    sum w_j (v_j + (m_j - mean)^2), the rank-by-rank recurrence summed out. An empty rank sends
    zeros (finite), so its weight 0 adds exactly nothing, with no 0/0. Returns N, the mean and M2/N.
    The total count is read once to the host (`.item()`, the forward's one device sync): the
    training-mode check and the running variance's N/(N-1) need it there.
    """
    total = counts.sum().item()
    if total <= 0:
        zeros = means.new_zeros(means.shape[1])
        return GlobalStats(0, zeros, zeros.clone())
    weights = counts / total
    mean = torch.mv(means.t(), weights)
    dev = means - mean
    return GlobalStats(round(total), mean, torch.mv(torch.addcmul(variances, dev, dev).t(), weights))


def merge_from_invstd(counts: torch.Tensor, means: torch.Tensor, invstds: torch.Tensor, eps: float) -> GlobalStats:
    """PyTorch's and Horovod's merge (batch_norm_gather_stats_with_counts): they send invstd, so each
    rank's variance is recovered as 1/invstd^2 - eps before the same Chan merge."""
    return chan_merge(counts, means, invstds.reciprocal().square_().sub_(eps))


def check_enough_values(stats: GlobalStats, world_size: int, shape: torch.Size) -> None:
    """PyTorch's training-mode check, on the global count: one value per channel has no variance."""
    if stats.count <= 1:
        raise ValueError(
            f"Expected more than 1 value per channel when training, got {stats.count} over all {world_size} "
            f"rank(s) (input size {list(shape)} on this rank)"
        )
