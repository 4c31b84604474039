"""SyncBatchNorm as an nn.Module with torch.nn.BatchNorm's parameters, buffers and state dict."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from commbench.syncbn.comm import communicator
from commbench.syncbn.function import SyncBatchNormFunction
from commbench.syncbn.strategies import get_strategy


class SyncBatchNorm(_BatchNorm):
    """Batch normalisation over the batches of every rank, with a selectable communication strategy.

    strategy: torch, torch_legacy, apex, horovod, horovod_grouped or allreduce (see
    commbench.syncbn.strategies). process_group: None for torch.distributed's default group (one
    local rank when torch.distributed is not initialised), a torch ProcessGroup, or any object with
    a commbench Backend's collective methods (a Backend itself: gloo, nccl, horovod).
    Training mode communicates; eval mode never does (running statistics, or this rank's batch
    when track_running_stats=False, as torch.nn.SyncBatchNorm).
    """

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        strategy: str = "torch",
        process_group: Any = None,
    ) -> None:
        chosen = get_strategy(strategy)  # a bad name fails before any state is built
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.strategy = chosen
        self.process_group = process_group

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if not 2 <= input.dim() <= 5:
            raise ValueError(f"expected 2D to 5D input (got {input.dim()}D input)")
        if input.shape[1] != self.num_features:
            raise ValueError(
                f"expected {self.num_features} channels in dim 1 of the input, got {input.shape[1]} (input size {list(input.shape)})"
            )

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, strategy={self.strategy.name}"

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                momentum = 1.0 / float(self.num_batches_tracked)
        if not self.training:
            # No communication in eval mode; without running statistics this rank's batch is used.
            use_batch = self.running_mean is None and self.running_var is None
            return F.batch_norm(
                input, self.running_mean, self.running_var, self.weight, self.bias, use_batch, 0.0, self.eps
            )
        running_mean = self.running_mean if self.track_running_stats else None
        running_var = self.running_var if self.track_running_stats else None
        comm = communicator(self.process_group)
        return SyncBatchNormFunction.apply(
            input, self.weight, self.bias, running_mean, running_var, self.eps, momentum, self.strategy, comm
        )
