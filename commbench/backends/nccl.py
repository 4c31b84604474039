"""NCCL: torch.distributed on one GPU per rank (commbench/backends/devices.py says which)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from commbench.backends.devices import bind_own_gpu
from commbench.backends.torch_dist import TorchDistBackend
from commbench.errors import UserError

if TYPE_CHECKING:
    from commbench.backends.job import Launch

# NCCL's words when two ranks of one communicator sit on one GPU.
DUPLICATE_GPU = "Duplicate GPU detected"


class NcclBackend(TorchDistBackend):
    """torch.distributed over NCCL; each rank binds its own GPU before the process group exists."""

    name = transport = "nccl"
    reduce_keeps_non_root = True  # ncclReduce reads the non-root buffers and writes only the root's

    def select_device(self, launch: Launch) -> torch.device:
        return bind_own_gpu(launch.local_rank, launch.local_world_size, self.name)

    def init(self, timeout_s: float, launch: Launch) -> None:
        try:
            super().init(timeout_s, launch)
        except RuntimeError as exc:
            # Ranks that each see one GPU (device 0) may still share it: NCCL finds out when the
            # communicator is created (at init, as the device is given), on every rank at once.
            if DUPLICATE_GPU in str(exc):
                raise UserError(
                    f"rank {launch.rank}: NCCL found two ranks on one GPU ({DUPLICATE_GPU}); give each rank its "
                    "own GPU: fewer ranks per host, or CUDA_VISIBLE_DEVICES naming a different GPU for each"
                ) from None
            raise

    def init_kwargs(self) -> dict[str, Any]:
        return {"device_id": self.device}

    def coalescing_device(self) -> torch.device | None:
        return self.device

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def version(self) -> str:
        return "nccl " + ".".join(str(v) for v in torch.cuda.nccl.version())
