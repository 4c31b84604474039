"""Gloo: torch.distributed on CPU tensors, or on CUDA tensors with --device cuda."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from commbench.backends.torch_dist import TorchDistBackend

if TYPE_CHECKING:
    from commbench.launchers import Launch


class GlooBackend(TorchDistBackend):
    """torch.distributed over Gloo; tensors live in host memory, or (--device cuda) on a GPU, which
    Gloo stages through host memory for the collectives it supports on CUDA."""

    name = "gloo"

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

    @property
    def control_device(self) -> torch.device:
        # Gloo gathers host tensors only, and stages CUDA ones through the host anyway.
        return torch.device("cpu")

    def version(self) -> str:
        return f"gloo (torch {torch.__version__})"
