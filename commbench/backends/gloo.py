"""Gloo: torch.distributed on CPU tensors, or on CUDA tensors with --device cuda."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import torch

from commbench.backends.torch_dist import TorchDistBackend

if TYPE_CHECKING:
    from commbench.backends.base import Work
    from commbench.backends.job import Launch

# What Gloo cannot run on CUDA tensors, read from torch/csrc/distributed/c10d/ProcessGroupGloo.cpp
# (docs/gpu.md): the collectives it stages through pinned host memory (its *CUDAWork classes:
# allreduce, broadcast, reduce, allgather and _allgather_base, gather, scatter, alltoall_base, and
# reduce_scatter_tensor_coalesced through allreduce) run; these do not, so they are refused before a
# call hands Gloo a device pointer. Keyed by the names Backend.missing() takes ("group": every
# grouped collective, which torch's coalescing manager sends to Gloo's *_coalesced calls).
CUDA_REFUSED = {
    "send_recv": "Gloo's send and recv hand the tensor's memory to its transport as it is, with no copy through "
    "host memory, so they cannot move CUDA tensors (use --device cpu, or nccl)",
    "group": "Gloo's coalesced collectives run on CPU tensors only (allreduce_coalesced refuses CUDA tensors and "
    "allgather_coalesced does not copy them to host memory); use --device cpu, or nccl",
}

# Collectives a torch's ProcessGroupGloo does not override, by the name missing() takes, with the
# first torch whose ProcessGroupGloo.hpp declares them: before it, c10d's Backend base refuses the
# call ("Backend gloo does not support alltoall"). Read off the headers each wheel ships: torch
# 2.11's declares alltoall_base only, 2.12's and 2.13's declare alltoall too. Known before any call,
# so the case is an `unavailable` row on every device, not a failed sweep.
SINCE_TORCH = {"all_to_all_list": ((2, 12), "alltoall")}


def torch_lacks(collective: str, version: str = torch.__version__) -> str | None:
    """Why this torch's Gloo has no such collective (too old for SINCE_TORCH), or None."""
    if collective not in SINCE_TORCH:
        return None
    since, method = SINCE_TORCH[collective]
    found = re.match(r"(\d+)\.(\d+)", version)  # the release only: a 2.12 nightly has 2.12's sources
    if found is None or (int(found[1]), int(found[2])) >= since:
        return None
    first = ".".join(map(str, since))
    return f"torch {version}'s Gloo has no {method} (ProcessGroupGloo overrides it from torch {first}); upgrade torch, or use nccl"


class GlooBackend(TorchDistBackend):
    """torch.distributed over Gloo; tensors live in host memory, or (--device cuda) on a GPU, which
    Gloo stages through host memory for the collectives it supports on CUDA."""

    name = transport = "gloo"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__()
        self.wanted_device = device

    def select_device(self, launch: Launch) -> torch.device:
        if self.wanted_device != "cuda":
            return torch.device("cpu")
        # Gloo ranks may share a GPU (Gloo, not NCCL, moves the data): spread them over the visible ones.
        device = torch.device("cuda", (launch.local_rank or 0) % max(1, torch.cuda.device_count()))
        torch.cuda.set_device(device)
        return device

    def on_cuda(self) -> bool:
        return self.wanted_device == "cuda"

    def missing(self, collective: str) -> str | None:
        if self.on_cuda() and collective in CUDA_REFUSED:
            return CUDA_REFUSED[collective]
        return torch_lacks(collective) or super().missing(collective)

    def group_unavailable(self) -> str | None:
        return CUDA_REFUSED["group"] if self.on_cuda() else super().group_unavailable()

    def send_recv(self, sends: list[tuple[torch.Tensor, int]], recvs: list[tuple[torch.Tensor, int]]) -> list[Work]:
        if (reason := self.missing("send_recv")) is not None:
            raise NotImplementedError(reason)  # before Gloo's transport is handed device memory
        return super().send_recv(sends, recvs)

    def synchronize(self) -> None:
        # On CUDA tensors Gloo's wait objects make the current stream wait for the copy back from host
        # memory; the untimed drain before a barrier must wait for that stream too.
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @property
    def control_device(self) -> torch.device:
        # Gloo gathers host tensors only, and stages CUDA ones through the host anyway.
        return torch.device("cpu")

    def version(self) -> str:
        return f"gloo (torch {torch.__version__})"
