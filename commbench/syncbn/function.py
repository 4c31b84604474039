"""The autograd Function of SyncBatchNorm in training mode: synchronised statistics forward,
synchronised gradient sums backward (docs/syncbn.md), in torch's batch-norm kernels on any device.

torch.nn.SyncBatchNorm's own kernels (batch_norm_stats, batch_norm_elemt, batch_norm_backward_reduce,
batch_norm_backward_elemt) are CUDA-only, so the eval-mode forms of torch's batch norm, which run
everywhere, do the full-size work, given the merged global statistics as their "running" ones.
The backward differs by device (docs/gpu.md lists the kernel contracts): on CUDA the eval-mode
backward's non-fused path asserts that save_mean and save_invstd are defined, so there the sums come
from batch_norm_backward_reduce and grad_input from batch_norm_backward_elemt, as torch.nn.SyncBatchNorm
computes them (_cuda_backward); elsewhere:
  forward   the rank's statistics (stats.local_stats: torch's statistics kernel, or two vectorised
            reductions where that kernel is slow), then the normalisation in one pass
            (torch.native_batch_norm in eval mode with the global mean and biased variance);
  backward  sum(dy) and sum(dy (x - mean)) in one pass (native_batch_norm_backward in eval mode returns
            them as grad_bias and grad_weight = sum(dy (x - mean)) * invstd), then grad_input from the
            synchronised sums in two elementwise passes (no CPU kernel fuses them): the eval-mode
            normalisation of x gives its x and constant terms, and an in-place addcmul adds dy's.
Everything else is per-channel vectors. Half inputs keep float32 statistics and sums (the kernels'
mixed-type mode) and are never copied to float32; channels_last inputs are never copied.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from commbench.syncbn.comm import Communicator
from commbench.syncbn.stats import check_enough_values, per_channel
from commbench.syncbn.strategies import Strategy


def _as(t: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    return t if t is None or t.dtype == dtype else t.to(dtype)


def _update_running(running: torch.Tensor | None, value: torch.Tensor, momentum: float) -> None:
    """running = (1 - momentum) running + momentum value."""
    if running is not None:
        running.lerp_(_as(value, running.dtype), momentum)


def _grad_sums(
    dy: torch.Tensor, input: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, invstd: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sum(dy), sum(dy (x - mean)), sum(dy (x - mean)) * invstd) per channel, in the statistics' type.

    One pass of the eval-mode batch-norm backward, which returns the last and the first (as grad_weight
    and grad_bias; it divides nothing by the count). An empty batch sums to zeros (the kernel would
    divide by zero on it): an empty rank still joins the all-reduce its peers wait on.
    """
    if input.numel() == 0:
        zeros = mean.new_zeros(mean.shape)
        return zeros, zeros.clone(), zeros.clone()
    _, dot_invstd, sum_dy = torch.ops.aten.native_batch_norm_backward(
        dy, input, None, mean, var, None, None, False, eps, [False, True, True]
    )
    # The kernel scales by its own 1/sqrt(var + eps); dividing by ours recovers the sum to an ulp.
    return sum_dy, dot_invstd / invstd, dot_invstd


def _grad_input(
    dy: torch.Tensor,
    input: torch.Tensor,
    weight: torch.Tensor | None,
    mean: torch.Tensor,
    var: torch.Tensor,
    invstd: torch.Tensor,
    total_dy: torch.Tensor,
    total_dy_xmu: torch.Tensor,
    n: int,
    eps: float,
) -> torch.Tensor:
    """(dy - total_dy/n - (x - mean) invstd^2 total_dy_xmu/n) * invstd * weight, in input's dtype.

    The x and constant terms are the eval-mode normalisation of x with weight -invstd^2 total_dy_xmu/n
    * weight (the kernel multiplies by its own invstd) and bias -total_dy/n * invstd * weight; dy *
    invstd * weight is added in place. Half inputs get the sum in float32, rounded once at the end.
    """
    scale = invstd if weight is None else invstd * weight
    neg_scale = scale * (-1.0 / n)
    x_bias = total_dy * neg_scale
    x_weight = torch.mul(total_dy_xmu, neg_scale).mul_(invstd)
    ndim = input.dim()
    if input.dtype == mean.dtype:
        grad = torch.native_batch_norm(input, x_weight, x_bias, mean, var, False, 0.0, eps)[0]
        return grad.addcmul_(dy, per_channel(scale, ndim))
    # Half input: the same terms in float32 (x * a + b, as the eval kernel computes them), then dy.
    x_scale = x_weight.mul_(invstd)
    x_shift = x_bias.addcmul_(mean, x_scale, value=-1)
    grad = torch.addcmul(per_channel(x_shift, ndim), input, per_channel(x_scale, ndim))
    return grad.addcmul_(dy, per_channel(scale, ndim)).to(input.dtype)


def uses_cuda_kernels(input: torch.Tensor) -> bool:
    """Whether the backward runs torch.nn.SyncBatchNorm's CUDA kernels (tests fake them on the CPU)."""
    return input.device.type == "cuda"


def _kernel_layouts(input: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """input contiguous in its own format (NCHW or channels_last), dy in the same one.

    The CUDA kernels pick their channels_last form from one tensor alone (backward_elemt reads
    grad_output's layout, then indexes input's data pointer the same way), so the two must share a
    layout; a non-contiguous input is copied once, as torch.nn.SyncBatchNorm's forward does.
    """
    for fmt in (torch.contiguous_format, torch.channels_last, torch.channels_last_3d):
        if (fmt is torch.contiguous_format or input.dim() == (4 if fmt is torch.channels_last else 5)) and (
            input.is_contiguous(memory_format=fmt)
        ):
            return input, dy.contiguous(memory_format=fmt)
    return input.contiguous(), dy.contiguous()


@functools.lru_cache(maxsize=16)
def count_tensor(count: int, device: torch.device) -> torch.Tensor:
    """The global count as batch_norm_backward_elemt reads it (int32, on input's device), made once per
    count and device: torch.tensor from a Python value is a pageable host-to-device copy, which would
    otherwise sit inside every timed backward. A case's count is fixed, so one per case; the kernel
    only reads it (count.const_data_ptr<int>())."""
    return torch.tensor([count], dtype=torch.int32, device=device)


def _cuda_backward(
    ctx: Any, dy: torch.Tensor, input: torch.Tensor, weight: torch.Tensor | None, mean: torch.Tensor, var: torch.Tensor
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """(grad_input, grad_weight, grad_bias) from torch.nn.SyncBatchNorm's CUDA kernels.

    Their contracts (aten/src/ATen/native/cuda/Normalization.cu and .cuh): mean and invstd of one
    dtype, the accumulation type of input's (float32 for half inputs); grad_weight and grad_bias are
    allocated with weight's options, so they are asked for only where a weight exists; weight is
    read in the statistics' type (mixed mode for half inputs); count is an int32 tensor whose sum is
    the global count. An empty rank still joins the all-reduce, with zeros.
    """
    invstd = torch.rsqrt(var + ctx.eps)
    input, dy = _kernel_layouts(input, dy)
    stat_weight = _as(weight, mean.dtype)
    want_input, want_weight, want_bias = (
        ctx.needs_input_grad[0],
        weight is not None and ctx.needs_input_grad[1],
        weight is not None and ctx.needs_input_grad[2],
    )
    if input.numel() == 0:
        sum_dy, sum_dy_xmu, grad_weight, grad_bias = (mean.new_zeros(mean.shape) for _ in range(4))
    else:
        sum_dy, sum_dy_xmu, grad_weight, grad_bias = torch.batch_norm_backward_reduce(
            dy, input, mean, invstd, stat_weight, want_input, want_weight, want_bias
        )
    grad_input = None
    if want_input:
        total_dy, total_dy_xmu = ctx.strategy.backward(ctx.comm, sum_dy, sum_dy_xmu)
        if input.numel() == 0:
            grad_input = torch.zeros_like(input)
        else:
            grad_input = torch.batch_norm_backward_elemt(
                dy, input, mean, invstd, stat_weight, total_dy, total_dy_xmu, count_tensor(ctx.count, input.device)
            )
    return (
        grad_input,
        _as(grad_weight, weight.dtype) if want_weight else None,  # type: ignore[union-attr]
        _as(grad_bias, weight.dtype) if want_bias else None,  # type: ignore[union-attr]
    )


class SyncBatchNormFunction(torch.autograd.Function):
    """apply(input, weight, bias, running_mean, running_var, eps, momentum, strategy, comm).

    grad_weight and grad_bias are this rank's own (not synchronised), as in PyTorch and Horovod:
    data-parallel training sums them with the other gradients, so their sum over ranks is the
    gradient of the whole batch.
    """

    @staticmethod
    def forward(
        ctx: Any,
        input: torch.Tensor,
        weight: torch.Tensor | None,
        bias: torch.Tensor | None,
        running_mean: torch.Tensor | None,
        running_var: torch.Tensor | None,
        eps: float,
        momentum: float,
        strategy: Strategy,
        comm: Communicator,
    ) -> torch.Tensor:
        stats = strategy.forward(comm, input, eps)
        # Every rank holds the same global count, so every rank raises together: no peer is left waiting.
        check_enough_values(stats, comm.world_size, input.shape)
        _update_running(running_mean, stats.mean, momentum)
        if running_var is not None:
            _update_running(running_var, stats.unbiased_var(), momentum)
        ctx.save_for_backward(input, weight, stats.mean, stats.var)
        ctx.count, ctx.eps, ctx.strategy, ctx.comm = stats.count, eps, strategy, comm
        # torch's eval-mode batch norm with the global statistics: one fused pass, in input's dtype and layout.
        dtype = stats.mean.dtype
        return torch.native_batch_norm(
            input, _as(weight, dtype), _as(bias, dtype), stats.mean, stats.var, False, 0.0, eps
        )[0]

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        input, weight, mean, var = ctx.saved_tensors
        if uses_cuda_kernels(input):
            return *_cuda_backward(ctx, grad_output, input, weight, mean, var), None, None, None, None, None, None
        invstd = torch.rsqrt(var + ctx.eps)
        sum_dy, sum_dy_xmu, dot_invstd = _grad_sums(grad_output, input, mean, var, invstd, ctx.eps)
        grad_weight = _as(dot_invstd, weight.dtype) if weight is not None and ctx.needs_input_grad[1] else None
        grad_bias = _as(sum_dy, weight.dtype) if weight is not None and ctx.needs_input_grad[2] else None
        grad_input = None
        if ctx.needs_input_grad[0]:
            total_dy, total_dy_xmu = ctx.strategy.backward(ctx.comm, sum_dy, sum_dy_xmu)
            grad_input = _grad_input(
                grad_output,
                input,
                _as(weight, mean.dtype),
                mean,
                var,
                invstd,
                total_dy,
                total_dy_xmu,
                ctx.count,
                ctx.eps,
            )
        return grad_input, grad_weight, grad_bias, None, None, None, None, None, None
