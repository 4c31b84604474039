"""Communication/computation overlap: does a collective hide behind compute issued while it runs?

With --overlap every case measures, in the same rounds as the op alone, a compute kernel alone (a
square matmul of the case's device and dtype family) and both together: the op issued async, the
kernel run, then every wait object completed. On CUDA the matmul runs on the current stream while
the collective runs on its own; on CPU with Gloo the collective runs on Gloo's threads while the
matmul uses torch's intra-op threads, so the two compete for the same cores.

    overlap = (comm + compute - overlapped) / min(comm, compute), clipped to [0, 1]

1 is perfect hiding (overlapped = max(comm, compute)), 0 none (overlapped = comm + compute).
docs/overlap.md says how to read it and what it is not; the row's fraction is
commbench/results/stats.py's overlap_fraction.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from commbench.errors import UserError
from commbench.units import parse_count

AUTO = "auto"
MIN_SIDE, MAX_SIDE = 8, 16384  # matmul side: 1 kFLOP to 8.8 TFLOP
# The calibration probe starts at PROBE_SIDE and doubles until one run takes PROBE_MIN_S: a shorter
# one times the launch and the clock (15-25 us on a GPU), not the kernel, and would make the
# calibrated matmul 100-1000x too short. MAX_PROBE_SIDE bounds its memory (192 MiB in float32).
PROBE_SIDE, MAX_PROBE_SIDE = 128, 4096
PROBE_MIN_S = 5e-4
# Device memory the memory check reserves for an auto-sized matmul (its three matrices): the
# calibration never picks a larger side, so the check, made before it runs, still holds.
AUTO_KERNEL_BYTES = 256 << 20


def parse_compute(text: str) -> str:
    """--compute: 'auto' or a FLOP count (K, M, G, 1e9 forms); returned as typed, validated."""
    if str(text).strip().lower() == AUTO:
        return AUTO
    flops = parse_count(str(text).strip(), "--compute")
    if flops > flops_of(MAX_SIDE):
        raise UserError(f"--compute {text!r} is more than {flops_of(MAX_SIDE):.3g} FLOP; give less, or auto")
    return str(flops)


def flops_of(side: int) -> float:
    return 2.0 * side**3


def side_for(flops: float, largest: int = MAX_SIDE) -> int:
    """The square matmul side whose 2 n^3 FLOP is nearest to flops, within [MIN_SIDE, largest]."""
    return max(MIN_SIDE, min(largest, round((max(flops, 0.0) / 2.0) ** (1 / 3))))


def kernel_bytes(side: int, element_size: int) -> int:
    """Memory of a matmul's three side x side matrices."""
    return 3 * side * side * element_size


def overlap_bytes(compute: str, element_size: int) -> int:
    """What --overlap's matmul holds per rank, for the memory check: an explicit --compute kernel's
    matrices, or the most an auto-sized one may take (AUTO_KERNEL_BYTES)."""
    if compute == AUTO:
        return AUTO_KERNEL_BYTES
    return kernel_bytes(side_for(float(compute)), max(element_size, 2))


def auto_side_limit(element_size: int) -> int:
    """The largest side an auto-sized matmul may take: its matrices fit in AUTO_KERNEL_BYTES."""
    return max(MIN_SIDE, int(math.sqrt(AUTO_KERNEL_BYTES / (3 * element_size))))


@dataclass
class ComputeKernel:
    """C = A @ B on n x n matrices in the case's device; .run() issues it (async on CUDA)."""

    side: int
    device: Any
    dtype: Any
    a: Any = None
    b: Any = None
    c: Any = None

    def __post_init__(self) -> None:
        import torch

        self.a = torch.full((self.side, self.side), 0.5, device=self.device, dtype=self.dtype)
        self.b = torch.full((self.side, self.side), 0.25, device=self.device, dtype=self.dtype)
        self.c = torch.empty((self.side, self.side), device=self.device, dtype=self.dtype)

    @property
    def flops(self) -> float:
        return flops_of(self.side)

    def run(self) -> None:
        import torch

        torch.matmul(self.a, self.b, out=self.c)


def compute_dtype(dtype: Any) -> Any:
    """Matmul needs floating point: integer cases compute in float32."""
    import torch

    return dtype if dtype.is_floating_point else torch.float32


def calibrate(
    target_s: float,
    device: Any,
    dtype: Any,
    agree_max: Callable[[float], float],
    seconds_of: Callable[[ComputeKernel], float],
) -> ComputeKernel:
    """A kernel that takes about target_s here, sized by a probe's FLOP rate; every rank gets the same.

    Each rank measures its own rate on a probe grown until one run takes PROBE_MIN_S (probe_rate);
    the ranks agree on the largest FLOP count any of them wants (agree_max), so every rank runs the
    same kernel (and a rank on a slower core decides for all). The side stays within what the memory
    check reserved (auto_side_limit).
    """
    kind = compute_dtype(dtype)
    rate = probe_rate(device, kind, seconds_of)
    largest = auto_side_limit(torch_element_size(kind))
    return ComputeKernel(side_for(agree_max(target_s * rate), largest), device, kind)


def probe_rate(device: Any, dtype: Any, seconds_of: Callable[[ComputeKernel], float]) -> float:
    """FLOP per second of this device's matmul, from the fastest of 3 runs of a probe that takes at
    least PROBE_MIN_S (or has reached MAX_PROBE_SIDE)."""
    side = PROBE_SIDE
    while True:
        probe = ComputeKernel(side, device, dtype)
        seconds_of(probe)  # warm: first calls pay for allocation and dispatch
        took = min(seconds_of(probe) for _ in range(3))
        if took >= PROBE_MIN_S or side >= MAX_PROBE_SIDE:
            return probe.flops / max(took, 1e-9)
        side = min(MAX_PROBE_SIDE, side * 2)


def torch_element_size(dtype: Any) -> int:
    import torch

    return torch.empty((), dtype=dtype).element_size()


def cpu_note(device: Any) -> str:
    """On CPU, the row says how many cores the collective and the matmul shared."""
    if getattr(device, "type", "cpu") != "cpu":
        return ""
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    return (
        f"overlap on CPU: the matmul used {torch.get_num_threads()} intra-op thread(s) and the collective "
        f"Gloo's threads, on {cores / local:.3g} core(s) per rank"
    )


def wall_seconds(kernel: ComputeKernel, synchronize: Callable[[], None]) -> float:
    """One kernel's time, drained: for calibration only (the timed loop uses the case's timer)."""
    synchronize()
    start = time.perf_counter()
    kernel.run()
    synchronize()
    return time.perf_counter() - start


def event_seconds(kernel: ComputeKernel, event: Callable[..., Any]) -> float:
    """One kernel's time between two CUDA events around it on the current stream (event is
    torch.cuda.Event): the kernel alone, without the launch and the host's wake-up from a synchronise."""
    start, stop = event(enable_timing=True), event(enable_timing=True)
    start.record()
    kernel.run()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) * 1e-3


def seconds_of_kernel(device: Any, synchronize: Callable[[], None]) -> Callable[[ComputeKernel], float]:
    """The calibration's clock: CUDA events on a GPU, the synchronised host clock elsewhere."""
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        return lambda kernel: event_seconds(kernel, torch.cuda.Event)
    return lambda kernel: wall_seconds(kernel, synchronize)
