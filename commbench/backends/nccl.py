"""NCCL: torch.distributed on one GPU per rank (cuda:LOCAL_RANK)."""

from __future__ import annotations

from typing import Any

import torch

from commbench.backends.torch_dist import TorchDistBackend
from commbench.errors import UserError


class NcclBackend(TorchDistBackend):
    """torch.distributed over NCCL; rank r uses cuda:LOCAL_RANK and CUDA-synchronises before every clock read."""

    name = "nccl"
    reduce_keeps_non_root = True  # ncclReduce reads the non-root buffers and writes only the root's

    def select_device(self) -> torch.device:
        if not torch.cuda.is_available():
            raise UserError("--backend nccl needs a CUDA GPU and none is usable here; use --backend gloo")
        if self.local_rank >= torch.cuda.device_count():
            raise UserError(
                f"local rank {self.local_rank} has no GPU ({torch.cuda.device_count()} visible); "
                "NCCL needs one GPU per rank: lower --nproc / --nproc_per_node"
            )
        device = torch.device("cuda", self.local_rank)
        torch.cuda.set_device(device)
        return device

    def init_kwargs(self) -> dict[str, Any]:
        return {"device_id": self.device}

    def coalescing_device(self) -> torch.device | None:
        return self.device

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def version(self) -> str:
        return "nccl " + ".".join(str(v) for v in torch.cuda.nccl.version())
