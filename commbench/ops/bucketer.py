"""Gradient bucketing as FSDP (fairscale's ReduceScatterBucketer) and apex/DDP do it.

Both classes take the collective as a callable returning a wait object, so they run on any
backend and can be unit-tested without a process group. docs/ops.md describes their semantics.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from commbench.lazy import torch

if TYPE_CHECKING:
    from commbench.backends.base import Work

    ReduceScatter = Callable[[torch.Tensor, torch.Tensor], Work]  # (output shard, flat input of n shards)
    AllReduce = Callable[[torch.Tensor], Work]  # sum in place
    Callback = Callable[[torch.Tensor], Any]


@dataclass
class _Bucket:
    """One (dtype, device) bucket: n rows of `shard` columns, filled left to right."""

    data: torch.Tensor  # (n, shard)
    output_shard: torch.Tensor = field(init=False)
    offset: int = 0
    callbacks: list[Callable[[], Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.output_shard = torch.zeros_like(self.data[0])

    def flush(self, reduce_scatter: ReduceScatter) -> None:
        if self.offset == 0:
            return
        # A partly filled bucket is a column slice of data: not contiguous, so it is copied (as FSDP does).
        reduce_scatter(self.output_shard[: self.offset], self.data[:, : self.offset].reshape(-1)).wait()
        for callback in self.callbacks:
            callback()
        self.data[:, : self.offset].zero_()
        self.offset = 0
        self.callbacks.clear()
        # Callbacks may keep their views of the old output shard: never write into it again.
        self.output_shard = torch.zeros_like(self.data[0])


class ReduceScatterBucketer:
    """Packs many small reduce-scatters into few large ones, one bucket per (dtype, device).

    `reduce_scatter_async(inputs, callback)` takes the n equally shaped shards of one tensor (one per
    rank). An input larger than a bucket's shard is reduce-scattered at once; one that does not fit
    in the space left flushes the bucket first; the rest are stacked into the bucket's columns and
    their callbacks receive, at the next flush, a view of the reduced shard that stays valid after
    later flushes. A cap <= 0 disables bucketing: every input takes the direct path.
    Flushes complete before returning (fairscale runs them in order on one stream).
    """

    def __init__(self, reduce_scatter: ReduceScatter, world_size: int, bucket_cap_mb: float) -> None:
        self.reduce_scatter = reduce_scatter
        self.world_size = world_size
        self.bucket_cap_mb = bucket_cap_mb
        self.buckets: dict[tuple[torch.dtype, torch.device], _Bucket] = {}

    def shard_size(self, element_size: int) -> int:
        """Columns of a bucket: floor(cap bytes / element size / n); 0 when bucketing is disabled."""
        if self.bucket_cap_mb <= 0:
            return 0
        return int(self.bucket_cap_mb * 2**20 / element_size / self.world_size)

    def reduce_scatter_async(self, inputs: Sequence[torch.Tensor], callback: Callback | None = None) -> None:
        """Queue the sum over ranks of inputs[r] into rank r's shard; callback(reduced shard) runs when done."""
        n, first = self.world_size, inputs[0]
        if len(inputs) != n or any(t.shape != first.shape or t.dtype != first.dtype for t in inputs):
            raise ValueError(f"reduce_scatter_async needs {n} inputs of one shape and dtype")
        numel = first.numel()
        shard = self.shard_size(first.element_size())
        if numel > shard:
            output = torch.zeros_like(first)
            self.reduce_scatter(output, torch.cat([t.reshape(-1) for t in inputs])).wait()
            if callback is not None:
                callback(output)
            return
        bucket = self._bucket(first, shard)
        if numel > shard - bucket.offset:
            bucket.flush(self.reduce_scatter)
        start, stop = bucket.offset, bucket.offset + numel
        for row, t in zip(bucket.data, inputs):
            row[start:stop].copy_(t.reshape(-1))
        bucket.offset = stop
        if callback is not None:
            view = bucket.output_shard[start:stop].view_as(first)
            bucket.callbacks.append(lambda: callback(view))

    def flush(self) -> None:
        """Reduce-scatter every non-empty bucket and run its callbacks, in bucket creation order."""
        for bucket in self.buckets.values():
            bucket.flush(self.reduce_scatter)

    def pending(self) -> int:
        """Elements per rank-shard waiting in buckets (0 after flush())."""
        return sum(b.offset for b in self.buckets.values())

    def _bucket(self, like: torch.Tensor, shard: int) -> _Bucket:
        key = (like.dtype, like.device)
        if key not in self.buckets:
            self.buckets[key] = _Bucket(torch.zeros(self.world_size, shard, dtype=like.dtype, device=like.device))
        return self.buckets[key]


class FollowedBy:
    """A wait object that runs a follow-up (divide, copy back) once the collective has completed."""

    def __init__(self, work: Work, then: Callable[[], Any]) -> None:
        self.work, self.then = work, then

    def wait(self) -> None:
        self.work.wait()
        then, self.then = self.then, (lambda: None)  # waiting twice must not apply it twice
        then()


def message_buckets(tensors: Sequence[torch.Tensor], message_size: int) -> list[list[int]]:
    """Indices of tensors grouped by dtype (first-seen order), each bucket closed once it holds at least
    message_size elements (apex's DistributedDataParallel); message_size <= 1 gives one tensor per bucket."""
    return buckets_of([(t.dtype, t.numel()) for t in tensors], message_size)


def buckets_of(kinds_and_sizes: Sequence[tuple[Hashable, int]], message_size: int) -> list[list[int]]:
    """message_buckets of tensors given as (dtype or any key, element count): for estimates without tensors."""
    by_kind: dict[Hashable, list[list[int]]] = {}
    filled: dict[Hashable, int] = {}  # elements in each kind's open bucket
    for i, (kind, numel) in enumerate(kinds_and_sizes):
        buckets = by_kind.setdefault(kind, [[]])
        if filled.get(kind, 0) >= max(message_size, 1):
            buckets.append([])
            filled[kind] = 0
        buckets[-1].append(i)
        filled[kind] = filled.get(kind, 0) + numel
    return [bucket for buckets in by_kind.values() for bucket in buckets]


def average_(tensor: torch.Tensor, world_size: int) -> torch.Tensor:
    """Divide in place by the world size (floor division for integer tensors, which cannot hold a mean)."""
    if tensor.is_floating_point():
        return tensor.div_(world_size)
    return tensor.div_(world_size, rounding_mode="floor")


class AllReduceBucketer:
    """apex Reducer / DDP gradient averaging: per bucket of message_size elements, flatten, all_reduce
    (async), then divide by n and copy back into the tensors. A one-tensor bucket is reduced in place."""

    def __init__(self, all_reduce: AllReduce, world_size: int, message_size: int) -> None:
        self.all_reduce = all_reduce
        self.world_size = world_size
        self.message_size = message_size

    def reduce(self, tensors: Sequence[torch.Tensor]) -> list[FollowedBy]:
        """Issue one all_reduce per bucket; waiting on a returned object leaves its tensors averaged."""
        works = []
        for bucket in message_buckets(tensors, self.message_size):
            members = [tensors[i] for i in bucket]
            if len(members) == 1 and members[0].is_contiguous():
                flat = members[0]
                works.append(FollowedBy(self.all_reduce(flat), lambda flat=flat: average_(flat, self.world_size)))
                continue
            flat = torch.cat([t.reshape(-1) for t in members])
            works.append(
                FollowedBy(self.all_reduce(flat), lambda flat=flat, members=members: self._unflatten(flat, members))
            )
        return works

    def _unflatten(self, flat: torch.Tensor, members: list[torch.Tensor]) -> None:
        average_(flat, self.world_size)
        for t, piece in zip(members, flat.split([m.numel() for m in members])):
            t.copy_(piece.view_as(t))
