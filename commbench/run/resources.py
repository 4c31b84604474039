"""Refuse a sweep whose largest size cannot fit in memory, before anything is allocated.

An out-of-memory kill half-way through a long sweep loses the node, and on a GPU an allocation
failure can leave the process group wedged; a one-line refusal with the estimate costs nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch

from commbench.backends.base import Backend
from commbench.ops import choose_variants
from commbench.ops.base import Op, Point
from commbench.run.config import SweepConfig
from commbench.run.harness import CollArgs, unavailable, window_for
from commbench.units import format_size

# What a rank adds to its resident memory after the check while it measures a case of negligible
# size (buffers the process group and the timed loop allocate on first use; measured with bench/memory.py).
RUNTIME_GROWTH_BYTES = 64 << 20


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


def largest_need(ops: Sequence[Op], cfg: SweepConfig, backend: Backend) -> tuple[int, Op, Point] | None:
    """(bytes per rank, op, point) of the most demanding case the sweep will run on this backend."""
    needs = [(op.memory_bytes(args, point), op, point) for op, args, point in _cases(ops, cfg, backend)]
    return max(needs, key=lambda need: need[0], default=None)


def _cases(ops: Sequence[Op], cfg: SweepConfig, backend: Backend) -> Iterator[tuple[Op, CollArgs, Point]]:
    """Every (op, arguments before set-up, point) that the sweep will measure on this backend."""
    for op in ops:
        for torch_dtype in (getattr(torch, dtype) for dtype in cfg.dtypes):
            for variant in choose_variants(op.variants, cfg.variants):
                if unavailable(op, variant, backend, torch_dtype) is None:
                    window = window_for(op, variant, cfg.window_per_sample)
                    args = CollArgs(backend=backend, dtype=torch_dtype, variant=variant, window=window)
                    yield from ((op, args, point) for point in op.points(cfg.sizes))


def memory_error(ops: Sequence[Op], cfg: SweepConfig, backend: Backend, local_ranks: int | None = None) -> str | None:
    """Why the sweep cannot fit on this rank's host or device, or None when it fits (or cannot tell).

    Checked in every rank once the process group is up, so the runtime of every local rank (torch,
    the process group) is already resident and out of what is available; RUNTIME_GROWTH_BYTES is
    what a rank still adds while it measures even the smallest case.
    """
    if (largest := largest_need(ops, cfg, backend)) is None:
        return None
    need, op, point = largest
    need += RUNTIME_GROWTH_BYTES
    device = backend.device
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
