"""What every transport provides to the harness and the ops.

A backend owns one transport: process-group set-up, the collective calls (each returns a wait
object with ``.wait()``), barrier, device synchronisation, the clock and teardown. It counts the
API names it calls, so every result row records which API was actually used and how many calls
one op iteration made, without the harness knowing anything about the op.

A call can also be bound once and issued many times (binding(), bind()): the harness's timed loop
then calls the transport's own function with its arguments already in place, and the API names
are counted once, when the call is bound, instead of at every issue.
"""

from __future__ import annotations

import os
import socket
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import torch

if TYPE_CHECKING:
    from commbench.backends.job import Launch


class Work(Protocol):
    """A wait object: the handle an async collective returns."""

    def wait(self) -> Any: ...


class Binding:
    """The calls bound in one `with backend.binding()`: the API name of each, counted once per bound
    call (a bound call does not count again when issued), and what to undo when the scope ends."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.armed = False  # True while bind() runs a collective method, which then binds instead of calling
        self.releases: list[Callable[[], None]] = []

    def count(self, api: str) -> None:
        self.calls[api] += 1

    def close(self) -> None:
        for release in self.releases:
            release()
        self.releases.clear()


OPTIONAL_COLLECTIVES = (
    "all_to_all_single",
    "all_to_all_list",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
    "send_recv",
    "barrier_async",
)


class Backend(ABC):
    """One transport. Subclasses set rank, world_size, local_rank and device in init()."""

    name: ClassVar[str]
    # How this transport groups K collectives into one operation, named as the op variants are:
    # "coalesced" (torch's coalescing manager), "grouped" (Horovod's grouped_*), or None.
    grouping: ClassVar[str | None] = None

    # True when the transport is a torch.distributed process group (torch.nn.SyncBatchNorm needs one).
    torch_process_group: ClassVar[bool] = False

    # Collectives this transport does not have, by the name missing() takes, with the reason an
    # `unavailable` row gives (Horovod has no reduce, gather, scatter or send/recv).
    lacks: ClassVar[Mapping[str, str]] = {}

    # True when reduce leaves the non-root ranks' tensors as they were (NCCL only reads them);
    # Gloo's reduce uses them as scratch, so the reduce op cannot check them there.
    reduce_keeps_non_root: ClassVar[bool] = False

    # True when every collective method goes through bound_or_called() (or an equivalent), so that
    # bind() gets the transport's own call back without issuing it. Otherwise bind() binds the
    # method itself, which then counts its API (record) each time it runs.
    binds: ClassVar[bool] = False

    def __init__(self) -> None:
        self.rank = 0
        self.node_rank: int | None = 0  # None where the launcher does not say
        self.world_size = 1
        self.local_rank: int | None = 0  # None where the launcher does not say
        self.host = socket.gethostname()  # init() takes the Launch's (which COMMBENCH_HOST may set)
        self.device = torch.device("cpu")
        self.calls: Counter[str] = Counter()
        # Collective calls since init, never cleared: published by the heartbeat so a timeout can
        # name the rank that never issued the call its peers wait in (commbench/run/heartbeat.py).
        self.issued = 0
        self._binding: Binding | None = None

    # -- life cycle ---------------------------------------------------------------------------
    @abstractmethod
    def init(self, timeout_s: float, launch: Launch) -> None:
        """Join the process group of this launch; set rank, world_size, local_rank and device."""

    @abstractmethod
    def close(self) -> None:
        """Leave the process group."""

    @abstractmethod
    def version(self) -> str:
        """The transport's version string for provenance."""

    # -- collectives (all async: each returns a wait object) ---------------------------------
    @abstractmethod
    def all_gather_flat(self, output: torch.Tensor, input: torch.Tensor) -> Work:
        """Gather equal-sized inputs into one flat output (rank r's input at [r*k, (r+1)*k))."""

    @abstractmethod
    def all_gather_list(self, outputs: list[torch.Tensor], input: torch.Tensor) -> Work:
        """Gather rank r's input into outputs[r]."""

    @abstractmethod
    def reduce_scatter_flat(self, output: torch.Tensor, input: torch.Tensor) -> Work:
        """Sum the flat inputs over ranks; rank r receives shard r (input is n shards of output's size)."""

    @abstractmethod
    def reduce_scatter_list(self, output: torch.Tensor, inputs: list[torch.Tensor]) -> Work:
        """Sum inputs[r] over ranks into rank r's output."""

    @abstractmethod
    def all_reduce(self, tensor: torch.Tensor) -> Work:
        """Sum in place over ranks."""

    def dtype_unavailable(self, dtype: torch.dtype) -> str | None:
        """Why this transport cannot move tensors of dtype, or None when it can."""
        return None

    # -- grouped collectives: K tensors in one operation ---------------------------------------
    def group_unavailable(self) -> str | None:
        """Why this transport cannot group collectives, or None when all_*_group work."""
        return f"the {self.name} backend has no grouped collectives"

    def all_gather_group(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> Work:
        """all_gather_flat of every (output, input) pair as one grouped operation."""
        raise NotImplementedError(self.group_unavailable())

    def all_reduce_group(self, tensors: list[torch.Tensor]) -> Work:
        """all_reduce (sum, in place) of every tensor as one grouped operation."""
        raise NotImplementedError(self.group_unavailable())

    def reduce_scatter_group(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> Work:
        """reduce_scatter_flat of every (output, input) pair as one grouped operation."""
        raise NotImplementedError(self.group_unavailable())

    # -- the rest of the family: optional, a transport that lacks one says why in `lacks` -------
    def missing(self, collective: str) -> str | None:
        """Why this transport cannot run a collective, or None when it can.

        collective is one of the optional methods below, or an in-place form the ops use
        ("all_gather_inplace": the input is a view of the rank's own chunk of the output;
        "reduce_scatter_inplace": the output is a view of the rank's own chunk of the input).
        """
        if collective in self.lacks:
            return self.lacks[collective]
        if collective in OPTIONAL_COLLECTIVES and getattr(type(self), collective) is getattr(Backend, collective):
            return f"the {self.name} backend does not implement {collective}"
        return None

    def _lacking(self, collective: str) -> NotImplementedError:
        return NotImplementedError(self.missing(collective) or f"the {self.name} backend lacks {collective}")

    def all_to_all_single(
        self,
        output: torch.Tensor,
        input: torch.Tensor,
        output_splits: list[int] | None = None,
        input_splits: list[int] | None = None,
    ) -> Work:
        """Rank r sends input's chunk p to rank p and receives rank q's chunk r into output's chunk q.

        Chunks are equal without splits; with them, input_splits[p] elements go to rank p and
        output_splits[q] elements come from rank q.
        """
        raise self._lacking("all_to_all_single")

    def all_to_all_list(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> Work:
        """inputs[p] goes to rank p; rank q's inputs[r] lands in outputs[q]."""
        raise self._lacking("all_to_all_list")

    def broadcast(self, tensor: torch.Tensor, root: int) -> Work:
        """Every rank's tensor becomes root's (in place)."""
        raise self._lacking("broadcast")

    def reduce(self, tensor: torch.Tensor, root: int) -> Work:
        """Sum over ranks into root's tensor (in place); see reduce_keeps_non_root for the others."""
        raise self._lacking("reduce")

    def gather(self, outputs: list[torch.Tensor] | None, input: torch.Tensor, root: int) -> Work:
        """Rank r's input lands in root's outputs[r]; outputs is None on the other ranks."""
        raise self._lacking("gather")

    def scatter(self, output: torch.Tensor, inputs: list[torch.Tensor] | None, root: int) -> Work:
        """Root's inputs[r] lands in rank r's output; inputs is None on the other ranks."""
        raise self._lacking("scatter")

    def send_recv(self, sends: list[tuple[torch.Tensor, int]], recvs: list[tuple[torch.Tensor, int]]) -> list[Work]:
        """Send each (tensor, peer) and receive each (tensor, peer) as one batch; one wait object per transfer."""
        raise self._lacking("send_recv")

    def barrier_async(self) -> Work:
        """A barrier that returns a wait object: the measured barrier op (the harness's own is barrier())."""
        raise self._lacking("barrier_async")

    # -- control ------------------------------------------------------------------------------
    @abstractmethod
    def barrier(self) -> None:
        """Block until every rank arrives (untimed)."""

    @abstractmethod
    def all_gather_object(self, obj: Any) -> list[Any]:
        """Gather a small picklable object from every rank (control plane, not measured)."""

    # The control plane between timed blocks: every rank needs the per-iteration maxima over ranks,
    # and rank 0 alone the per-rank samples (--raw). A transport reduces a float64 tensor of one
    # value per iteration, so each rank sends and receives O(iterations), whatever the world size.
    # These fallbacks gather every rank's values (O(world x iterations) per rank) for a transport
    # that has no reduction; commbench's transports override them. Not recorded: not the op's calls.
    def reduce_floats(self, values: Sequence[float], op: str) -> list[float]:
        """values combined element-wise over ranks, on every rank; op is "max" or "sum".

        Exact on float64: a max picks one rank's value, and a sum of integers below 2**53 is exact.
        """
        combine = max if op == "max" else sum
        return [combine(column) for column in zip(*self.all_gather_object(list(values)))]

    def gather_floats(self, values: Sequence[float]) -> list[list[float]] | None:
        """Every rank's values, by rank, on rank 0; None on the other ranks. Same length on every rank."""
        everyone = self.all_gather_object(list(values))
        return everyone if self.rank == 0 else None

    def gather_object(self, obj: Any) -> list[Any] | None:
        """A small picklable object from every rank, by rank, on rank 0; None on the other ranks."""
        everyone = self.all_gather_object(obj)
        return everyone if self.rank == 0 else None

    def synchronize(self) -> None:
        """Wait for the device to finish queued work; a no-op on CPU."""

    def clock(self) -> float:
        """Seconds, read only after the device is idle, so a timer never spans un-synchronised launches."""
        self.synchronize()
        return time.perf_counter()

    def host_clock(self) -> Callable[[], float]:
        """What a host timer reads at each mark. In host memory there is nothing to drain (synchronize
        is a no-op on CPU, overridden or not: Gloo's and Horovod's drain a GPU only), so a mark is one
        time.perf_counter read; on a device, clock (synchronise, then read)."""
        return time.perf_counter if self.device.type == "cpu" else self.clock

    # -- bookkeeping --------------------------------------------------------------------------
    def record(self, api: str) -> None:
        self.calls[api] += 1
        self.issued += 1

    # -- bound calls: issued many times, counted once -----------------------------------------
    @contextmanager
    def binding(self) -> Iterator[Binding]:
        """A scope in which bind() prepares calls; yields the Binding that counts their API names.

        What a bound call needs while it is being bound (Horovod's tensor names, taken so that the
        calls bound in one scope never share one) is released when the scope ends: the calls of one
        scope may then be in flight together, and with nothing else of theirs.
        """
        self._binding = binding = Binding()
        try:
            yield binding
        finally:
            self._binding = None
            binding.close()

    def bind(self, method: Callable[..., Any], *args: Any) -> Callable[[], Any]:
        """method(*args) (a collective method of this backend) bound once, to be issued many times.

        On a backend that binds (binds = True) the result is the transport's own function with its
        arguments in place, and its API name is counted in the scope's Binding now; calling it
        neither records nor counts. Elsewhere it is the method itself, which records as it runs.
        """
        binding = self._binding
        if binding is None:
            raise RuntimeError("Backend.bind() is only valid inside `with backend.binding()`")
        if not self.binds:
            return partial(method, *args)
        binding.armed = True
        try:
            return method(*args)
        finally:
            binding.armed = False

    def bound_or_called(self, api: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """fn(*args, **kwargs) recorded as `api` and called; while bind() runs, fn bound instead."""
        binding = self._binding
        if binding is not None and binding.armed:
            binding.count(api)
            return partial(fn, *args, **kwargs)
        self.record(api)
        return fn(*args, **kwargs)

    def node_info(self) -> dict[str, Any]:
        """Where this rank runs, for provenance and diagnosis."""
        return {"rank": self.rank, "host": self.host, "node_rank": self.node_rank, "pid": os.getpid()}
