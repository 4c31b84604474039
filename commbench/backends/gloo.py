"""Gloo: torch.distributed on CPU tensors."""

from __future__ import annotations

import torch

from commbench.backends.torch_dist import TorchDistBackend


class GlooBackend(TorchDistBackend):
    """torch.distributed over Gloo; tensors live in host memory."""

    name = "gloo"
    # ProcessGroupGloo's worker threads: calls issued together run this many at a time.
    threads = 2

    def scratch_bytes(self, call: str, full_bytes: int, in_flight: int = 1) -> int:
        # Measured with bench/memory.py: ProcessGroupGloo reduce-scatters through a copy of the input
        # (of the other ranks' shards for the list form) made when the call is issued, so every call in
        # flight holds one; it gathers into a flat copy of the output made when a worker thread runs the
        # call, and a coalesced gather into flat copies of the inputs and the output (2 to 3.5 calls' worth
        # at once were measured with 8 in flight: counted for every call in flight, an upper bound).
        # all_reduce works in place.
        n = self.world_size
        if call in ("all_gather_flat", "all_gather_list"):
            return full_bytes * min(in_flight, self.threads)
        fraction = {"reduce_scatter_flat": 1.0, "reduce_scatter_list": (n - 1) / n, "all_gather_group": 1 + 1 / n}
        return int(fraction.get(call, 0.0) * full_bytes) * in_flight

    def version(self) -> str:
        return f"gloo (torch {torch.__version__})"
