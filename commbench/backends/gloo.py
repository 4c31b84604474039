"""Gloo: torch.distributed on CPU tensors."""

from __future__ import annotations

import torch

from commbench.backends.torch_dist import TorchDistBackend


class GlooBackend(TorchDistBackend):
    """torch.distributed over Gloo; tensors live in host memory."""

    name = "gloo"

    def version(self) -> str:
        return f"gloo (torch {torch.__version__})"
