"""torch.distributed as a transport, shared by the gloo and nccl backends.

Collective API names changed across torch versions (all_gather_single, all_gather_into_tensor,
_all_gather_base, ...); the newest one present is resolved once at init and recorded in every
result row, so no deprecation warning is hit. The names of the other collectives (all_to_all_single,
all_to_all, broadcast, reduce, gather, scatter, batch_isend_irecv, barrier) have not changed since
torch 1.8, so they are called as they are.
"""

from __future__ import annotations

import datetime
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch
import torch.distributed as dist

from commbench.backends.base import Backend, Work

if TYPE_CHECKING:
    from commbench.backends.job import Launch

# Newest first.
FLAT_ALL_GATHER = ("all_gather_single", "all_gather_into_tensor", "_all_gather_base")
FLAT_REDUCE_SCATTER = ("reduce_scatter_single", "reduce_scatter_tensor", "_reduce_scatter_base")


def resolve_api(candidates: tuple[str, ...]) -> str:
    """The first name in candidates that this torch.distributed has."""
    for name in candidates:
        if hasattr(dist, name):
            return name
    raise RuntimeError(f"this torch has none of {', '.join(candidates)}")


class TorchDistBackend(Backend):
    """torch.distributed with one process group spanning every rank."""

    # torch.distributed's name of the transport (init_process_group's backend); a subclass under
    # another commbench name keeps its parent's.
    transport: ClassVar[str]
    grouping = "coalesced"
    torch_process_group = True
    binds = True  # every collective goes through bound_or_called()

    def __init__(self) -> None:
        super().__init__()
        self.group: Any = None  # the default group
        self.flat_all_gather = resolve_api(FLAT_ALL_GATHER)
        self.flat_reduce_scatter = resolve_api(FLAT_REDUCE_SCATTER)
        self._all_gather_fn = getattr(dist, self.flat_all_gather)
        self._reduce_scatter_fn = getattr(dist, self.flat_reduce_scatter)
        # The older names still work but warn; whatever we call, users must not see it.
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.distributed")
        warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.distributed")

    def select_device(self, launch: Launch) -> torch.device:
        """The device this rank's tensors live on (set before the process group is created)."""
        return torch.device("cpu")

    def init_kwargs(self) -> dict[str, Any]:
        return {}

    def init(self, timeout_s: float, launch: Launch) -> None:
        # The rendezvous (MASTER_ADDR, MASTER_PORT) comes from the environment, as torchrun sets it
        # (under srun and mpirun, start() exports it from the Launch first).
        self.rank, self.world_size = launch.rank, launch.world_size
        self.local_rank, self.node_rank, self.host = launch.local_rank, launch.node_rank, launch.host
        self.device = self.select_device(launch)
        dist.init_process_group(
            backend=self.transport,
            rank=self.rank,
            world_size=self.world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
            **self.init_kwargs(),
        )

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()

    def all_gather_flat(self, output: torch.Tensor, input: torch.Tensor) -> Work:
        return self.bound_or_called(
            self.flat_all_gather, self._all_gather_fn, output, input, group=self.group, async_op=True
        )

    def all_gather_list(self, outputs: list[torch.Tensor], input: torch.Tensor) -> Work:
        return self.bound_or_called("all_gather", dist.all_gather, outputs, input, group=self.group, async_op=True)

    def reduce_scatter_flat(self, output: torch.Tensor, input: torch.Tensor) -> Work:
        return self.bound_or_called(
            self.flat_reduce_scatter, self._reduce_scatter_fn, output, input, group=self.group, async_op=True
        )

    def reduce_scatter_list(self, output: torch.Tensor, inputs: list[torch.Tensor]) -> Work:
        return self.bound_or_called(
            "reduce_scatter", dist.reduce_scatter, output, inputs, group=self.group, async_op=True
        )

    def all_reduce(self, tensor: torch.Tensor) -> Work:
        return self.bound_or_called("all_reduce", dist.all_reduce, tensor, group=self.group, async_op=True)

    def _global(self, rank: int) -> int:
        """A rank of this backend's group (roots and peers are given so) as the global rank torch takes."""
        return rank if self.group is None else dist.get_global_rank(self.group, rank)

    def all_to_all_single(
        self,
        output: torch.Tensor,
        input: torch.Tensor,
        output_splits: list[int] | None = None,
        input_splits: list[int] | None = None,
    ) -> Work:
        return self.bound_or_called(
            "all_to_all_single",
            dist.all_to_all_single,
            output,
            input,
            output_splits,
            input_splits,
            group=self.group,
            async_op=True,
        )

    def all_to_all_list(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> Work:
        return self.bound_or_called("all_to_all", dist.all_to_all, outputs, inputs, group=self.group, async_op=True)

    def broadcast(self, tensor: torch.Tensor, root: int) -> Work:
        return self.bound_or_called(
            "broadcast", dist.broadcast, tensor, self._global(root), group=self.group, async_op=True
        )

    def reduce(self, tensor: torch.Tensor, root: int) -> Work:
        return self.bound_or_called("reduce", dist.reduce, tensor, self._global(root), group=self.group, async_op=True)

    def gather(self, outputs: list[torch.Tensor] | None, input: torch.Tensor, root: int) -> Work:
        return self.bound_or_called(
            "gather", dist.gather, input, outputs, dst=self._global(root), group=self.group, async_op=True
        )

    def scatter(self, output: torch.Tensor, inputs: list[torch.Tensor] | None, root: int) -> Work:
        return self.bound_or_called(
            "scatter", dist.scatter, output, inputs, src=self._global(root), group=self.group, async_op=True
        )

    def send_recv(self, sends: list[tuple[torch.Tensor, int]], recvs: list[tuple[torch.Tensor, int]]) -> list[Work]:
        # One batch: NCCL runs it as one group (sends and receives cannot deadlock on each other);
        # Gloo returns a wait object per transfer. The P2POp descriptors only name what to move, so a
        # bound batch builds them once.
        p2p = [dist.P2POp(dist.isend, t, self._global(peer), group=self.group) for t, peer in sends]
        p2p += [dist.P2POp(dist.irecv, t, self._global(peer), group=self.group) for t, peer in recvs]
        return self.bound_or_called("batch_isend_irecv", dist.batch_isend_irecv, p2p)

    def barrier_async(self) -> Work:
        return self.bound_or_called("barrier", dist.barrier, group=self.group, async_op=True)

    # Grouping goes through torch's private coalescing manager: the calls inside it are fused into
    # one operation (one wait object). Gloo needs device=None to coalesce; NCCL takes its device.
    def coalescing_device(self) -> torch.device | None:
        return None

    def group_unavailable(self) -> str | None:
        if not hasattr(dist, "_coalescing_manager"):
            return f"torch {torch.__version__} has no torch.distributed._coalescing_manager"
        return None

    def _coalesced(self, fn: Any, pairs: list[tuple[Any, ...]], api: str) -> Work:
        if (reason := self.group_unavailable()) is not None:
            raise NotImplementedError(reason)
        return self.bound_or_called(f"_coalescing_manager({api})", self._coalesce, fn, pairs, self.coalescing_device())

    def _coalesce(self, fn: Any, pairs: list[tuple[Any, ...]], device: torch.device | None) -> Work:
        with dist._coalescing_manager(self.group, device, async_ops=True) as cm:
            for pair in pairs:
                fn(*pair, group=self.group)
        return cm

    def all_gather_group(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> Work:
        return self._coalesced(self._all_gather_fn, list(zip(outputs, inputs)), self.flat_all_gather)

    def all_reduce_group(self, tensors: list[torch.Tensor]) -> Work:
        return self._coalesced(dist.all_reduce, [(t,) for t in tensors], "all_reduce")

    def reduce_scatter_group(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> Work:
        return self._coalesced(self._reduce_scatter_fn, list(zip(outputs, inputs)), self.flat_reduce_scatter)

    def barrier(self) -> None:
        dist.barrier(group=self.group)

    def all_gather_object(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.group)
        return out

    @property
    def control_device(self) -> torch.device:
        """Where the control plane's tensors live: the rank's device (NCCL moves CUDA tensors only)."""
        return self.device

    def reduce_floats(self, values: Sequence[float], op: str) -> list[float]:
        if not values:  # every rank has as many values: every rank skips alike
            return []
        tensor = torch.tensor(values, dtype=torch.float64, device=self.control_device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM, group=self.group)
        return tensor.tolist()

    def gather_floats(self, values: Sequence[float]) -> list[list[float]] | None:
        tensor = torch.tensor(values, dtype=torch.float64, device=self.control_device)
        lead = self.rank == 0
        outputs = [torch.empty_like(tensor) for _ in range(self.world_size)] if lead else None
        dist.gather(tensor, outputs, dst=self._global(0), group=self.group)
        return [out.tolist() for out in outputs] if outputs is not None else None

    def gather_object(self, obj: Any) -> list[Any] | None:
        out: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object(obj, out, dst=self._global(0), group=self.group)
        return out
