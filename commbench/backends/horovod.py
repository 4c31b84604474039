"""Horovod as a transport: horovod.torch's collectives behind the Backend contract.

Horovod is optional. It is imported only when this backend initialises, and a missing or
unsuitable build is a one-line error that says how to fix it (torchtitan's habit).

Horovod's semantics differ from torch.distributed's in three ways that this module hides:
- results are new tensors, not written into the caller's output, so each wait object copies the
  result into the output the op handed in (the op then checks that output as usual);
- allgather concatenates on dim 0 and reducescatter splits dim 0 (uneven splits give the low
  ranks an extra row), so flat inputs are viewed as (n, shard) rows, which splits exactly;
- every async call carries a name that must match across ranks (see _Names).
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from commbench.backends import BACKENDS
from commbench.backends.base import Backend, Work
from commbench.backends.devices import bind_own_gpu
from commbench.errors import UserError

if TYPE_CHECKING:
    from commbench.backends.job import Launch

INSTALL_HINT = "install it with `bash scripts/install-horovod.sh` (see docs/horovod.md)"


def import_horovod() -> Any:
    """horovod.torch, or a one-line UserError saying how to install a build that works."""
    try:
        import horovod.torch as hvd
    except ImportError as exc:
        raise UserError(f"the horovod backend needs Horovod with PyTorch support ({exc}); {INSTALL_HINT}") from None
    missing = [api for api in REQUIRED_APIS if not hasattr(hvd, api)]
    if missing:
        version = getattr(__import__("horovod"), "__version__", "?")
        raise UserError(f"horovod {version} lacks {', '.join(missing)} (commbench needs >= 0.28); {INSTALL_HINT}")
    if not (hvd.gloo_built() or hvd.mpi_built()):
        raise UserError(f"this Horovod was built without a controller (neither Gloo nor MPI); {INSTALL_HINT}")
    if os.environ.get("HOROVOD_CONTROLLER") == "gloo" and not hvd.gloo_built():
        raise UserError(
            f"this Horovod was built without Gloo, which horovodrun --gloo and --nproc need (use mpirun, or {INSTALL_HINT})"
        )
    return hvd


def on_gpus(hvd: Any) -> bool:
    """True when Horovod ranks use GPU tensors: a Horovod built with NCCL, where CUDA works. Each rank
    then needs its own GPU (NCCL refuses two on one); otherwise tensors live in host memory (Gloo)."""
    return bool(hvd.nccl_built()) and torch.cuda.is_available()


def horovod_on_gpus() -> bool:
    """on_gpus for the launching process, before any rank exists: False when Horovod cannot load."""
    try:
        return on_gpus(import_horovod())
    except UserError:
        return False


REQUIRED_APIS = (
    "allgather_async",
    "grouped_allgather_async",
    "reducescatter_async",
    "grouped_reducescatter_async",
    "allreduce_async_",
    "grouped_allreduce_async_",
    "synchronize",
    "allgather_object",
    "barrier",
)


class _Names:
    """Tensor names that match across ranks and repeat across iterations.

    Horovod pairs async calls across ranks by name, and refuses two in-flight tensors with one
    name. Its response cache is also keyed by name: a name seen before (same shape and dtype) skips
    the full negotiation with the coordinator. A fresh name per call would defeat that cache and
    measure negotiation instead of the collective, so each call takes the lowest free slot for its
    API; every rank issues and completes in the same order, so every rank picks the same slot.
    """

    def __init__(self) -> None:
        self._busy: dict[str, set[int]] = defaultdict(set)

    def take(self, api: str) -> tuple[str, Callable[[], None]]:
        busy = self._busy[api]
        slot = next(i for i in range(len(busy) + 1) if i not in busy)
        busy.add(slot)
        return f"commbench.{api}.{slot}", lambda: busy.discard(slot)


class HorovodWork:
    """A Horovod handle as a wait object: synchronize, then hand the result to `finish`."""

    def __init__(self, hvd: Any, handle: Any, release: Callable[[], None], finish: Callable[[Any], None]) -> None:
        self._hvd, self._handle, self._release, self._finish = hvd, handle, release, finish
        self._done = False

    def wait(self) -> None:
        if self._done:
            return
        try:
            result = self._hvd.synchronize(self._handle)
        finally:
            self._done = True
            self._release()
        self._finish(result)


class BoundCall:
    """A bound call, and its own wait object: calling it issues the collective under the call's own
    name and returns itself; wait() synchronizes and finishes. The harness has at most one issue of a
    bound call in flight (the calls of a window are bound apart, each with its own name) and waits
    each once, so no object is made per call: the timed region pays for the collective and its
    copy, not for commbench's bookkeeping."""

    __slots__ = ("_finish", "_handle", "_issue", "_name", "_sync")

    def __init__(
        self, issue: Callable[[str], Any], name: str, sync: Callable[[Any], Any], finish: Callable[[Any], None]
    ) -> None:
        self._issue, self._name, self._sync, self._finish = issue, name, sync, finish
        self._handle: Any = None

    def __call__(self) -> BoundCall:
        self._handle = self._issue(self._name)
        return self

    def wait(self) -> None:
        self._finish(self._sync(self._handle))


def _copy_into(outputs: list[torch.Tensor]) -> Callable[[Any], None]:
    """A finisher that copies Horovod's result tensor(s) into the caller's outputs, element for element.

    The outputs' flat views are made here, once per call (once per bound call), not at every finish."""
    flats = [out.view(-1) for out in outputs]
    if len(outputs) == 1:  # the common case, without the list and zip: this runs inside the timer
        (out,), (flat,) = outputs, flats
        shape, count = out.shape, flat.numel()

        def finish_one(result: Any) -> None:
            if isinstance(result, (list, tuple)):
                (result,) = result  # one output, one result: more is a mismatch
            if result.shape == shape:  # no view: making one costs as much as a small copy
                out.copy_(result)
                return
            if result.numel() != count:  # a semantic mismatch, never a silent (broadcast) partial copy
                raise RuntimeError(f"horovod returned {result.numel()} elements where {count} were expected")
            flat.copy_(result.reshape(-1))

        return finish_one

    def finish(result: Any) -> None:
        results = list(result) if isinstance(result, (list, tuple)) else [result]
        for out, res in zip(flats, results, strict=True):
            if res.numel() != out.numel():  # a semantic mismatch, never a silent partial copy
                raise RuntimeError(f"horovod returned {res.numel()} elements where {out.numel()} were expected")
            out.copy_(res.reshape(-1))

    return finish


def _split_into(outputs: list[torch.Tensor]) -> Callable[[Any], None]:
    """A finisher that splits one gathered tensor into per-rank outputs."""
    flats = [out.view(-1) for out in outputs]
    sizes = [o.numel() for o in outputs]
    total = sum(sizes)

    def finish(result: Any) -> None:
        flat = result.reshape(-1)
        if flat.numel() != total:
            raise RuntimeError(f"horovod gathered {flat.numel()} elements where {total} were expected")
        for out, part in zip(flats, flat.split(sizes)):
            out.copy_(part)

    return finish


def _nothing(result: Any) -> None:
    """In-place collectives (allreduce_, broadcast_) need no copy."""


def _received(finish: Callable[[Any], None]) -> Callable[[Any], None]:
    """alltoall's result is (received tensor, received splits): finish with the tensor."""
    return lambda result: finish(result[0] if isinstance(result, (list, tuple)) else result)


NO_IN_PLACE = "returns a new tensor and takes no output buffer, so it has no in-place form"


def _barrier_handle_available() -> bool:
    """True when horovod.torch has the barrier enqueue that hvd.barrier() wraps (0.23 and later)."""
    try:
        from horovod.torch import mpi_ops
    except ImportError:
        return False
    return all(
        hasattr(obj, attr)
        for obj, attr in (
            (mpi_ops, "mpi_lib"),
            (mpi_ops, "_handle_map"),
            (mpi_ops, "global_process_set"),
            (getattr(mpi_ops, "mpi_lib", None), "horovod_torch_barrier"),
        )
    )


class HorovodBackend(Backend):
    """horovod.torch under horovodrun, or ranks spawned by `commbench sweep --backend horovod --nproc N`."""

    name = "horovod"
    grouping = "grouped"
    binds = True  # every collective goes through _issue()
    lacks: ClassVar[Mapping[str, str]] = {
        "reduce": "Horovod has no reduce to one root (only allreduce)",
        "gather": "Horovod has no gather to one root (only allgather)",
        "scatter": "Horovod has no scatter",
        "send_recv": "Horovod has no point-to-point send/recv",
        "all_gather_inplace": f"Horovod's allgather {NO_IN_PLACE}",
        "reduce_scatter_inplace": f"Horovod's reducescatter {NO_IN_PLACE}",
    }

    def __init__(self) -> None:
        super().__init__()
        self.hvd: Any = None
        self._names = _Names()

    # -- life cycle ---------------------------------------------------------------------------
    def init(self, timeout_s: float, launch: Launch) -> None:
        if (hint := BACKENDS[self.name].launcher_error(launch.kind)) is not None:
            raise UserError(hint)
        # Gloo's own timeout on connecting and on each operation; commbench's watchdog covers waits.
        os.environ.setdefault("HOROVOD_GLOO_TIMEOUT_SECONDS", str(max(1, int(timeout_s))))
        self.hvd = hvd = import_horovod()
        if "OMP_NUM_THREADS" not in os.environ:
            # As torchrun does (commbench's Horovod spawner sets the same). Idle OpenMP workers
            # spin after every parallel copy and, with synchronize() spinning too, starve Horovod's
            # background thread, which does the communication: 1 MB allgathers took 5-12x longer.
            torch.set_num_threads(1)
        hvd.init()
        self.rank, self.world_size, self.local_rank = hvd.rank(), hvd.size(), hvd.local_rank()
        self.node_rank, self.host = hvd.cross_rank(), launch.host
        if on_gpus(hvd):
            self.device = bind_own_gpu(self.local_rank, hvd.local_size(), self.name)

    def close(self) -> None:
        if self.hvd is not None and self.hvd.is_initialized():
            self.hvd.shutdown()

    def version(self) -> str:
        import horovod

        controller = "gloo" if self.hvd.gloo_enabled() else "mpi"
        return f"horovod {horovod.__version__} ({controller}, torch {torch.__version__})"

    def dtype_unavailable(self, dtype: torch.dtype) -> str | None:
        # Horovod 0.28's torch extension has no bfloat16 kernels on any path.
        if dtype == torch.bfloat16:
            return "horovod.torch does not support bfloat16 tensors"
        return None

    # -- collectives ---------------------------------------------------------------------------
    def _issue(self, api: str, call: Callable[[str], Any], finish: Callable[[Any], None]) -> Work:
        binding = self._binding
        if binding is not None and binding.armed:
            # Bound: the name is taken now, held until the binding scope ends (so the calls bound
            # together take different ones), and kept by the bound call, which the harness issues
            # only with the calls bound beside it in flight: nothing else can hold that name then.
            binding.count(api)
            name, release = self._names.take(api)
            binding.releases.append(release)
            return BoundCall(call, name, self.hvd.synchronize, finish)
        self.record(api)
        name, release = self._names.take(api)
        try:
            handle = call(name)
        except BaseException:
            release()
            raise
        return HorovodWork(self.hvd, handle, release, finish)

    def _rows(self, flat: torch.Tensor) -> torch.Tensor:
        """A flat input as (n, shard): reducescatter then hands rank r exactly row r."""
        return flat.reshape(self.world_size, -1)

    def all_gather_flat(self, output: torch.Tensor, input: torch.Tensor) -> Work:
        return self._issue("allgather", lambda name: self.hvd.allgather_async(input, name=name), _copy_into([output]))

    def all_gather_list(self, outputs: list[torch.Tensor], input: torch.Tensor) -> Work:
        # Horovod has no list form: gather flat, then split (the split copy is part of the time).
        return self._issue("allgather", lambda name: self.hvd.allgather_async(input, name=name), _split_into(outputs))

    def reduce_scatter_flat(self, output: torch.Tensor, input: torch.Tensor) -> Work:
        hvd, rows = self.hvd, self._rows(input)
        return self._issue(
            "reducescatter",
            lambda name: hvd.reducescatter_async(rows, name=name, op=hvd.Sum),
            _copy_into([output]),
        )

    def reduce_scatter_list(self, output: torch.Tensor, inputs: list[torch.Tensor]) -> Work:
        # No list form either: stacking the n inputs is a copy, and part of the time.
        hvd = self.hvd
        return self._issue(
            "reducescatter",
            lambda name: hvd.reducescatter_async(torch.stack([i.reshape(-1) for i in inputs]), name=name, op=hvd.Sum),
            _copy_into([output]),
        )

    def all_reduce(self, tensor: torch.Tensor) -> Work:
        hvd = self.hvd
        return self._issue("allreduce_", lambda name: hvd.allreduce_async_(tensor, name=name, op=hvd.Sum), _nothing)

    def all_to_all_single(
        self,
        output: torch.Tensor,
        input: torch.Tensor,
        output_splits: list[int] | None = None,
        input_splits: list[int] | None = None,
    ) -> Work:
        # Horovod splits dim 0: a flat tensor splits by elements; the received splits it returns
        # are implied by the output's size, which the copy checks.
        splits = None if input_splits is None else torch.tensor(input_splits, dtype=torch.int32)
        return self._issue(
            "alltoall",
            lambda name: self.hvd.alltoall_async(input, splits=splits, name=name),
            _received(_copy_into([output])),
        )

    def all_to_all_list(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> Work:
        # No list form: concatenating the inputs and splitting the result are copies, and part of the time.
        splits = torch.tensor([t.numel() for t in inputs], dtype=torch.int32)
        return self._issue(
            "alltoall",
            lambda name: self.hvd.alltoall_async(torch.cat([t.reshape(-1) for t in inputs]), splits=splits, name=name),
            _received(_split_into(outputs)),
        )

    def broadcast(self, tensor: torch.Tensor, root: int) -> Work:
        return self._issue("broadcast_", lambda name: self.hvd.broadcast_async_(tensor, root, name=name), _nothing)

    def barrier_async(self) -> Work:
        # hvd.barrier() is this enqueue followed by synchronize(): taking the handle instead lets the
        # barrier run as a wait object, like every other op. The calls are horovod.torch's own internals.
        if (reason := self.missing("barrier_async")) is not None:
            raise NotImplementedError(reason)
        from horovod.torch import mpi_ops

        def enqueue(name: str) -> Any:
            handle = mpi_ops.mpi_lib.horovod_torch_barrier(mpi_ops.global_process_set.process_set_id)
            mpi_ops._handle_map[handle] = (None, None)
            return handle

        return self._issue("barrier", enqueue, _nothing)

    def missing(self, collective: str) -> str | None:
        if collective == "barrier_async" and not _barrier_handle_available():
            return "this Horovod's barrier() returns no handle, so the barrier op cannot wait on it"
        return super().missing(collective)

    # -- grouped collectives: one negotiation for the whole group -----------------------------
    def group_unavailable(self) -> str | None:
        return None

    def all_gather_group(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> Work:
        inputs = list(inputs)
        return self._issue(
            "grouped_allgather",
            lambda name: self.hvd.grouped_allgather_async(inputs, name=name),
            _copy_into(list(outputs)),
        )

    def all_reduce_group(self, tensors: list[torch.Tensor]) -> Work:
        hvd, tensors = self.hvd, list(tensors)
        return self._issue(
            "grouped_allreduce_",
            lambda name: hvd.grouped_allreduce_async_(tensors, name=name, op=hvd.Sum),
            _nothing,
        )

    def reduce_scatter_group(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> Work:
        hvd, rows = self.hvd, [self._rows(i) for i in inputs]
        return self._issue(
            "grouped_reducescatter",
            lambda name: hvd.grouped_reducescatter_async(rows, name=name, op=hvd.Sum),
            _copy_into(list(outputs)),
        )

    # -- control ------------------------------------------------------------------------------
    def barrier(self) -> None:
        self.hvd.barrier()

    def all_gather_object(self, obj: Any) -> list[Any]:
        return self._control("allgather_object", lambda name: self.hvd.allgather_object(obj, name=name))

    def _control(self, api: str, call: Callable[[str], Any]) -> Any:
        """A control-plane call under a name of its own (matching across ranks, as every call's must)."""
        name, release = self._names.take(api)
        try:
            return call(name)
        finally:
            release()

    def reduce_floats(self, values: Sequence[float], op: str) -> list[float]:
        if not values:  # every rank has as many values: every rank skips alike
            return []
        hvd = self.hvd
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        reduce_op = hvd.Max if op == "max" else hvd.Sum
        self._control("control_allreduce", lambda name: hvd.allreduce_(tensor, name=name, op=reduce_op))
        return tensor.tolist()

    def gather_floats(self, values: Sequence[float]) -> list[list[float]] | None:
        # Horovod has no gather to one root: every rank receives the rows, and all but rank 0 drop
        # them. Only --raw asks for them, so the default sweep never pays this O(world) exchange.
        tensor = torch.tensor([list(values)], dtype=torch.float64, device=self.device)
        rows = self._control("control_allgather", lambda name: self.hvd.allgather(tensor, name=name))
        return rows.tolist() if self.rank == 0 else None

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
