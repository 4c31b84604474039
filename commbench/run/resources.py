"""Refuse a sweep whose largest size cannot fit in memory, before anything is allocated.

An out-of-memory kill half-way through a long sweep loses the node, and on a GPU an allocation
failure can leave the process group wedged; a one-line refusal with the estimate costs nothing.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import torch

from commbench.ops.base import Op, Point
from commbench.units import format_size


def host_available_bytes(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """MemAvailable (what can be allocated without swapping), or None where /proc/meminfo is absent."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def device_available_bytes(device: torch.device) -> int | None:
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
    ops: Sequence[Op], sizes: Sequence[int], world_size: int, device: torch.device, local_ranks: int | None = None
) -> str | None:
    """Why the sweep cannot fit on this rank's host or device, or None when it fits (or cannot tell)."""
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
