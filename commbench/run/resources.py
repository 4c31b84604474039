"""Refuse what this host cannot run, before anything is started or allocated: more local ranks
than its cores and memory carry, more nccl ranks than GPUs, a largest size that cannot fit.

An out-of-memory kill half-way through a long sweep loses the node, and on a GPU an allocation
failure can leave the process group wedged; a one-line refusal with the estimate costs nothing.
The host checks are torch-free, so the launching process runs them before it spawns a rank.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from commbench.lazy import torch
from commbench.ops.base import Op, Point
from commbench.units import format_size

# Host memory one rank holds besides its tensors: Python, torch and a Gloo process group. Peak RSS
# measured 247 MiB per rank at 2, 4 and 8 ranks (torch 2.13 CPU; bench/rank_memory.py); RSS counts
# shared library pages in full, so it is the safe side of what the ranks take together (PSS ~160 MiB).
RANK_RUNTIME_BYTES = 256 << 20
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


def largest_need(ops: Sequence[Op], sizes: Sequence[int], world_size: int) -> tuple[int, Op, Point]:
    """(bytes per rank, op, point) of the most demanding case of the sweep."""
    cases = ((op.memory_bytes(p, world_size), op, p) for op in ops for p in op.points(sizes))
    return max(cases, key=lambda c: c[0])


def memory_error(
    ops: Sequence[Op], sizes: Sequence[int], world_size: int, device: Any, local_ranks: int | None = None
) -> str | None:
    """Why the sweep cannot fit on this rank's host or device, or None when it fits (or cannot tell).

    Checked in every rank (the launcher has checked its own host before spawning, but a rank under
    torchrun, or on a GPU, is the first to know). device is the rank's torch.device.
    """
    if not ops:
        return None
    need, op, point = largest_need(ops, sizes, world_size)
    if device.type == "cuda":
        free, where, sharing = device_available_bytes(device), f"free on {device}", 1
    else:
        # Every rank on this host allocates the same tensors out of one pool of host memory.
        sharing = local_ranks or int(os.environ.get("LOCAL_WORLD_SIZE", 1))
        free, where = host_available_bytes(), "available on this host (MemAvailable)"
    if free is None or need * sharing <= free:
        return None
    per_host = f" x {sharing} ranks on this host = {format_size(need * sharing)}" if sharing > 1 else ""
    return (
        f"{op.name} at {point.label} needs about {format_size(need)} per rank{per_host}, but only "
        f"{format_size(free)} is {where}; lower {op.spec.workload_knobs}, or run fewer ranks per host"
    )


def local_ranks_error(
    nproc: int, ops: Sequence[Op], sizes: Sequence[int], on_host: bool, oversubscribe: bool = False
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
    if free is None or _host_bytes(nproc, ops, sizes, on_host) <= free:
        return None
    need, op, point = largest_need(ops, sizes, nproc) if on_host and ops else (0, None, None)
    each = f"{format_size(RANK_RUNTIME_BYTES)} each to run"
    remedies = []
    # Some ops' tensors grow with the world size (sync_bn builds the whole batch): search, not divide.
    low, high = 0, nproc
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if _host_bytes(mid, ops, sizes, on_host) <= free else (low, mid - 1)
    if low > 0:
        remedies.append(f"use --nproc {low} or fewer")
    if op is not None and point is not None and need * 4 >= RANK_RUNTIME_BYTES:  # only where it matters
        each += f" plus {format_size(need)} each for {op.name} at {point.label}"
        remedies.append(f"lower {op.spec.workload_knobs}")
    remedies.append("spread the ranks over hosts with torchrun")
    return (
        f"{nproc} rank{'s' if nproc > 1 else ''} would need about {format_size(_host_bytes(nproc, ops, sizes, on_host))} "
        f"({each}), but only {format_size(free)} is available on this host (MemAvailable); {', or '.join(remedies)}"
    )


def _host_bytes(ranks: int, ops: Sequence[Op], sizes: Sequence[int], on_host: bool) -> int:
    """Host memory `ranks` local ranks take: each one's runtime, and its tensors when they live on the host."""
    need = largest_need(ops, sizes, ranks)[0] if on_host and ops else 0
    return ranks * (RANK_RUNTIME_BYTES + need)
