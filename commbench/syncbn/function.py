"""The autograd Function of SyncBatchNorm in training mode: synchronised statistics forward,
synchronised gradient sums backward (docs/syncbn.md), in plain torch ops on any device."""

from __future__ import annotations

from typing import Any

import torch

from commbench.syncbn.comm import Communicator
from commbench.syncbn.stats import check_enough_values, per_channel, reduce_dims, stat_dtype
from commbench.syncbn.strategies import Strategy


def _normalize(
    xs: torch.Tensor, mean: torch.Tensor, invstd: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None
) -> torch.Tensor:
    scale = invstd if weight is None else invstd * weight.to(invstd.dtype)
    out = (xs - per_channel(mean, xs.dim())) * per_channel(scale, xs.dim())
    return out if bias is None else out + per_channel(bias.to(invstd.dtype), xs.dim())


def _update_running(running: torch.Tensor | None, value: torch.Tensor, momentum: float) -> None:
    if running is not None:
        running.mul_(1 - momentum).add_(value.to(running.dtype), alpha=momentum)


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
        xs = input.to(stat_dtype(input.dtype))
        stats = strategy.forward(comm, xs, eps)
        # Every rank holds the same global count, so every rank raises together: no peer is left waiting.
        check_enough_values(stats, comm.world_size, input.shape)
        _update_running(running_mean, stats.mean, momentum)
        _update_running(running_var, stats.unbiased_var(), momentum)
        invstd = stats.invstd(eps)
        ctx.save_for_backward(input, weight, stats.mean, invstd)
        ctx.count, ctx.strategy, ctx.comm = stats.count, strategy, comm
        return _normalize(xs, stats.mean, invstd, weight, bias).to(input.dtype)

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        input, weight, mean, invstd = ctx.saved_tensors
        xs, dy = input.to(mean.dtype), grad_output.to(mean.dtype)
        dims, ndim = reduce_dims(xs), xs.dim()
        xmu = xs - per_channel(mean, ndim)
        # Sums over an empty batch are zeros: an empty rank still joins the all-reduce its peers wait on.
        sum_dy = dy.sum(dims)
        sum_dy_xmu = (dy * xmu).sum(dims)
        grad_weight = (sum_dy_xmu * invstd).to(weight.dtype) if weight is not None and ctx.needs_input_grad[1] else None
        grad_bias = sum_dy.to(weight.dtype) if weight is not None and ctx.needs_input_grad[2] else None
        grad_input = None
        if ctx.needs_input_grad[0]:
            total_dy, total_dy_xmu = ctx.strategy.backward(ctx.comm, sum_dy, sum_dy_xmu)
            n = ctx.count
            scale = invstd if weight is None else invstd * weight.to(invstd.dtype)
            grad = dy - per_channel(total_dy / n, ndim) - xmu * per_channel(invstd.square() * total_dy_xmu / n, ndim)
            grad_input = (grad * per_channel(scale, ndim)).to(input.dtype)
        return grad_input, grad_weight, grad_bias, None, None, None, None, None, None
