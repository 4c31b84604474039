"""What SyncBatchNorm needs from a transport: the collective methods of commbench's Backend.

A commbench Backend (gloo, nccl, horovod) already is a communicator, so the harness hands its
backend straight to the module and every call is counted in the CSV's `calls`. A user's torch
ProcessGroup (or the default group) is wrapped by ProcessGroupComm, which reuses the torch
backend's API-name resolution and coalescing. Without torch.distributed there is one rank and
SingleProcessComm, so the same code path (and its checks) runs everywhere.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch
import torch.distributed as dist

from commbench.backends.base import Work
from commbench.backends.torch_dist import TorchDistBackend


@runtime_checkable
class Communicator(Protocol):
    """The subset of commbench.backends.base.Backend that the strategies call (all async)."""

    rank: int
    world_size: int

    def all_gather_flat(self, output: torch.Tensor, input: torch.Tensor) -> Work: ...

    def all_gather_list(self, outputs: list[torch.Tensor], input: torch.Tensor) -> Work: ...

    def all_reduce(self, tensor: torch.Tensor) -> Work: ...

    def all_gather_group(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> Work: ...

    def all_reduce_group(self, tensors: list[torch.Tensor]) -> Work: ...


class ProcessGroupComm(TorchDistBackend):
    """A torch.distributed process group that someone else created, seen as a Communicator."""

    name = "process_group"

    def __init__(self, group: Any = None) -> None:
        super().__init__()
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self._gloo = dist.get_backend(group) == "gloo"

    def init(self, timeout_s: float, launch: Any = None) -> None:
        raise RuntimeError("ProcessGroupComm wraps an initialised process group; it does not create one")

    def close(self) -> None:
        """The group belongs to the caller, who destroys it."""

    def version(self) -> str:
        return f"{dist.get_backend(self.group)} (torch {torch.__version__})"

    def coalescing_device(self) -> torch.device | None:
        # Gloo coalesces only with device=None; NCCL needs the current GPU.
        return None if self._gloo else torch.device("cuda", torch.cuda.current_device())


class _Done:
    """The wait object of a collective that completed at once."""

    def wait(self) -> bool:
        return True


class SingleProcessComm:
    """One rank, no transport: a gather copies, a sum leaves the tensor as it is."""

    rank = 0
    world_size = 1

    def all_gather_flat(self, output: torch.Tensor, input: torch.Tensor) -> Work:
        output.copy_(input.reshape(output.shape))
        return _Done()

    def all_gather_list(self, outputs: list[torch.Tensor], input: torch.Tensor) -> Work:
        outputs[0].copy_(input)
        return _Done()

    def all_reduce(self, tensor: torch.Tensor) -> Work:
        return _Done()

    def all_gather_group(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> Work:
        for output, input in zip(outputs, inputs):
            self.all_gather_flat(output, input)
        return _Done()

    def all_reduce_group(self, tensors: list[torch.Tensor]) -> Work:
        return _Done()


def communicator(process_group: Any) -> Communicator:
    """A Communicator for what the module was given: a commbench Backend (or any Communicator) as it
    is, a torch ProcessGroup, or None for the default group (one local rank without torch.distributed)."""
    if isinstance(process_group, Communicator):
        return process_group
    if process_group is None and not (dist.is_available() and dist.is_initialized()):
        return SingleProcessComm()
    return ProcessGroupComm(process_group)
