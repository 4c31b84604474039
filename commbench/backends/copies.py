"""What each transport allocates inside its calls beyond the caller's tensors, for memory estimates.

Torch-free, so the launching process can estimate a sweep's memory before it starts a rank. One
function per backend, named by its BackendInfo (commbench/backends/__init__.py): copies(call, full_bytes, world_size, in_flight) -> bytes, where call names the
Backend method (all_gather_list, ...), full_bytes is the call's larger side (the gathered output,
the reduce-scatter input, the all-reduce buffer, what a rank sends or receives at most) and
in_flight how many such calls are issued before any completes.
"""

from __future__ import annotations

from collections.abc import Callable

Copies = Callable[[str, int, int, int], int]

# ProcessGroupGloo's worker threads: calls issued together run this many at a time.
GLOO_THREADS = 2


def gloo(call: str, full_bytes: int, world_size: int, in_flight: int) -> int:
    """Measured with bench/memory.py (torch 2.13). ProcessGroupGloo reduce-scatters through a copy of
    the input (of the other ranks' shards for the list form) made when the call is issued, so every
    call in flight holds one; it gathers (all_gather, gather at the root) into a flat copy of the
    output made when a worker thread runs the call; the list all_to_all copies its inputs and its
    outputs flat, and a coalesced gather its inputs and outputs (2 to 3.5 calls' worth at once were
    measured with 8 in flight: every call in flight is counted, an upper bound). all_reduce,
    broadcast, reduce, scatter, all_to_all_single and send/recv work in the caller's tensors."""
    n = world_size
    if call in ("all_gather_flat", "all_gather_list", "gather"):
        return full_bytes * min(in_flight, GLOO_THREADS)
    fraction = {
        "reduce_scatter_flat": 1.0,
        "reduce_scatter_list": (n - 1) / n,
        "all_gather_group": 1 + 1 / n,
        "all_to_all_list": 2.0,
    }.get(call, 0.0)
    return int(fraction * full_bytes) * in_flight


def nccl(call: str, full_bytes: int, world_size: int, in_flight: int) -> int:
    """ProcessGroupNCCL moves the list forms through one flat copy per call (newLikeFlat), held in the
    caching allocator until the call completes; the flat forms and the rest need none."""
    return full_bytes * in_flight if call in ("all_gather_list", "reduce_scatter_list") else 0


def horovod(call: str, full_bytes: int, world_size: int, in_flight: int) -> int:
    """Horovod returns a new tensor per call, copied into the caller's (the gathered output, the
    shard), and the list reduce-scatter stacks its inputs first; allreduce_ works in place."""
    n = world_size
    fraction = {
        "all_gather_flat": 1.0,
        "all_gather_list": 1.0,
        "all_gather_group": 1.0,
        "reduce_scatter_flat": 1 / n,
        "reduce_scatter_group": 1 / n,
        "reduce_scatter_list": 1 + 1 / n,
    }.get(call, 0.0)
    return int(fraction * full_bytes) * in_flight


def no_copies(call: str, full_bytes: int, world_size: int, in_flight: int) -> int:
    """A transport that declares none (a plugin's, a test double's)."""
    return 0
