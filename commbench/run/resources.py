"""Refuse what this host cannot run, before anything is started or allocated: more local ranks
than its cores and memory carry, more nccl ranks than GPUs, a largest size that cannot fit.

An out-of-memory kill half-way through a long sweep loses the node, and on a GPU an allocation
failure can leave the process group wedged; a one-line refusal with the estimate costs nothing.
The host checks are torch-free, so the launching process runs them before it spawns a rank.
Also here: measuring a peak (reset_peak, peak_bytes), for bench/memory.py and device checks.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commbench.backends import BACKENDS, copies_of
from commbench.lazy import torch
from commbench.ops import choose_variants, unavailable
from commbench.ops.base import Op
from commbench.ops.memory import MemoryCase
from commbench.ops.spec import Point
from commbench.run.config import DTYPE_BYTES, SweepConfig, op_points
from commbench.run.overlap import overlap_bytes
from commbench.units import format_size

if TYPE_CHECKING:
    from commbench.backends.base import Backend

# Host memory one rank holds besides its tensors: Python, torch and a Gloo process group. Peak RSS
# measured 247 MiB per rank at 2, 4 and 8 ranks (torch 2.13 CPU; bench/rank_memory.py); RSS counts
# shared library pages in full, so it is the safe side of what the ranks take together (PSS ~160 MiB).
RANK_RUNTIME_BYTES = 256 << 20
# What a running rank still adds after the in-rank check, measuring a case of negligible size (the
# process group's and the timed loop's first-use buffers: 10-50 MiB in bench/memory.py).
RUNTIME_GROWTH_BYTES = 64 << 20
# Ranks per core before a local sweep stops measuring the transport: ranks wait on each other
# in every collective, so a few share a core well, but each one spends a CPU-second or two
# importing torch and every extra one stretches each iteration by another time slice.
RANKS_PER_CORE = 8
OVERSUBSCRIBE_FLAG = "--oversubscribe"


def host_available_bytes(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """MemAvailable (what can be allocated without swapping), or None where /proc/meminfo is absent."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, as taskset or a container sets it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def device_available_bytes(device: Any) -> int | None:
    """Free memory on a CUDA device; None for host devices."""
    if device.type != "cuda":
        return None
    free, _total = torch.cuda.mem_get_info(device)
    return free


Runnable = Callable[[Op, str, str], bool]  # (op, variant, dtype name) -> will this case run?


def largest_need(
    ops: Sequence[Op], cfg: SweepConfig, world_size: int, on_host: bool, runnable: Runnable | None = None
) -> tuple[int, Op, Point] | None:
    """(bytes per rank, op, point) of the sweep's most demanding case with world_size ranks, over its
    dtypes, chosen variants (those runnable allows; all when it is None) and points; None when no
    case runs. Torch-free: the launching process calls it before it starts a rank."""
    needs = []
    for op in ops:
        for dtype in cfg.dtypes:
            for variant in choose_variants(op.variants, cfg.variants):
                if runnable is not None and not runnable(op, variant, dtype):
                    continue
                case = memory_case(op, variant, dtype, cfg, world_size, on_host)
                needs += [(op.memory_bytes(case, point), op, point) for point in op_points(op, cfg.sizes)]
    return max(needs, key=lambda need: need[0], default=None)


def memory_case(op: Op, variant: str, dtype: str, cfg: SweepConfig, world_size: int, on_host: bool) -> MemoryCase:
    """What op.memory_bytes needs to know of one (variant, dtype) of this sweep."""
    window = op.spec.window_for(variant, cfg.window_per_sample)
    return MemoryCase(world_size, variant, DTYPE_BYTES[dtype], window, copies_of(cfg.backend), on_host)


def memory_error(ops: Sequence[Op], cfg: SweepConfig, backend: Backend, local_ranks: int | None = None) -> str | None:
    """Why the sweep cannot fit on this rank's host or device, or None when it fits (or cannot tell).

    Checked in every rank once its process group is up (the launcher has checked its own host before
    spawning, but a rank under torchrun, or on a GPU, is the first to know): the runtime of every
    local rank is resident by then and out of what is available, and only the cases that run on this
    backend count. RUNTIME_GROWTH_BYTES is what a rank still adds while it measures.
    """
    device = backend.device
    on_host = device.type != "cuda"

    def runnable(op: Op, variant: str, dtype: str) -> bool:
        return unavailable(op, variant, backend, getattr(torch, dtype)) is None

    if (largest := largest_need(ops, cfg, backend.world_size, on_host, runnable)) is None:
        return None
    need, op, point = largest
    # What is allocated after this check: the runtime's first-use buffers, the transport's own
    # (NCCL's per communicator), and --overlap's matmul.
    need += RUNTIME_GROWTH_BYTES + transport_reserve(cfg, backend)
    if cfg.overlap:
        need += overlap_bytes(cfg.compute, max(DTYPE_BYTES[d] for d in cfg.dtypes))
    if not on_host:
        free, where = device_available_bytes(device), f"free on {device}"
        sharing = ranks_per_gpu(backend, local_ranks or int(os.environ.get("LOCAL_WORLD_SIZE", 1)))
    else:
        # Every rank on this host allocates the same tensors out of one pool of host memory.
        sharing = local_ranks or int(os.environ.get("LOCAL_WORLD_SIZE", 1))
        free, where = host_available_bytes(), "available on this host (MemAvailable)"
    if free is None or need * sharing <= free:
        return None
    shared = "host" if on_host else "GPU"
    per_host = f" x {sharing} ranks on this {shared} = {format_size(need * sharing)}" if sharing > 1 else ""
    return (
        f"{op.name} at {point.label} needs about {format_size(need)} per rank{per_host}, but only "
        f"{format_size(free)} is {where}; lower {op.spec.workload_knobs}, or run fewer ranks per host"
    )


def transport_reserve(cfg: SweepConfig, backend: Backend) -> int:
    """Device memory the transport allocates outside torch after the check: its info's
    communicator_bytes per communicator a rank joins (the world, and its group under --group)."""
    if backend.device.type != "cuda":
        return 0
    return BACKENDS[backend.name].communicator_bytes * (1 if cfg.group == "world" else 2)


def ranks_per_gpu(backend: Backend, local_ranks: int) -> int:
    """Local ranks that allocate out of this rank's GPU: one where each rank takes a GPU of its own
    (NCCL, Horovod); where ranks may share them (Gloo's CUDA ranks, spread over the visible GPUs by
    local rank), the local ranks over the GPUs."""
    if not BACKENDS[backend.name].shares_gpus:
        return 1
    return -(-max(1, local_ranks) // max(1, torch.cuda.device_count()))


def local_ranks_error(
    nproc: int, ops: Sequence[Op], cfg: SweepConfig, on_host: bool, oversubscribe: bool = False
) -> str | None:
    """Why this host cannot start nproc local ranks, or None; checked before any rank is spawned.

    The cores are a soft limit (--oversubscribe lifts it); the memory is not: past MemAvailable
    the kernel kills processes, and not only commbench's. on_host: the ranks' tensors live in
    host memory (gloo), so the sweep's largest case counts as well as each rank's runtime.
    """
    cores = usable_cores()
    if nproc > RANKS_PER_CORE * cores and not oversubscribe:
        return (
            f"--nproc {nproc} is more ranks than this host runs well: at most {RANKS_PER_CORE} per core x {cores} "
            f"core{'s' if cores > 1 else ''} = {RANKS_PER_CORE * cores} (beyond, the timings measure the scheduler); "
            f"pass {OVERSUBSCRIBE_FLAG} to start them anyway"
        )
    free = host_available_bytes()
    if free is None or _host_bytes(nproc, ops, cfg, on_host) <= free:
        return None
    largest = largest_need(ops, cfg, nproc, on_host=True) if on_host else None
    need, op, point = largest or (0, None, None)
    each = f"{format_size(RANK_RUNTIME_BYTES)} each to run"
    remedies = []
    # Some ops' tensors grow with the world size (sync_bn builds the whole batch): search, not divide.
    low, high = 0, nproc
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if _host_bytes(mid, ops, cfg, on_host) <= free else (low, mid - 1)
    if low > 0:
        remedies.append(f"use --nproc {low} or fewer")
    if op is not None and point is not None and need * 4 >= RANK_RUNTIME_BYTES:  # only where it matters
        each += f" plus {format_size(need)} each for {op.name} at {point.label}"
        remedies.append(f"lower {op.spec.workload_knobs}")
    remedies.append("spread the ranks over hosts with torchrun")
    return (
        f"{nproc} rank{'s' if nproc > 1 else ''} would need about {format_size(_host_bytes(nproc, ops, cfg, on_host))} "
        f"({each}), but only {format_size(free)} is available on this host (MemAvailable); {', or '.join(remedies)}"
    )


def _host_bytes(ranks: int, ops: Sequence[Op], cfg: SweepConfig, on_host: bool) -> int:
    """Host memory `ranks` local ranks take: each one's runtime, and its tensors when they live on the host."""
    largest = largest_need(ops, cfg, ranks, on_host=True) if on_host else None
    return ranks * (RANK_RUNTIME_BYTES + (largest[0] if largest else 0))


def _status_bytes(key: str) -> int:
    """A size field of /proc/self/status (VmRSS, VmHWM) in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) * 1024
    raise OSError(f"/proc/self/status has no {key}")


def reset_peak(device: torch.device) -> int:
    """Start a peak-memory measurement: bytes in use now (host RSS, or a CUDA device's allocated bytes).

    peak_bytes(device) - reset_peak(device) is then the peak above this point. On the host the peak
    is the kernel's high-water mark, reset through /proc/self/clear_refs (Linux 4.0+).
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.memory_allocated(device)
    _release_free_heap()
    Path("/proc/self/clear_refs").write_text("5")
    return _status_bytes("VmRSS")


def _release_free_heap() -> None:
    """Hand memory the C allocator keeps after free() back to the kernel (glibc's malloc_trim), so that
    reusing it shows in the next peak instead of hiding behind the resident set."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to release, or no way to
        ctypes.CDLL(None).malloc_trim(0)


def peak_bytes(device: torch.device) -> int:
    """The peak since reset_peak(device): VmHWM on the host, torch.cuda.max_memory_allocated on CUDA."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device)
    return _status_bytes("VmHWM")
