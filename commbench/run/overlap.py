"""Communication/computation overlap: does a collective hide behind compute issued while it runs?

With --overlap every case measures, in the same rounds as the op alone, a compute kernel alone (a
square matmul of the case's device and dtype family) and both together: the op issued async, the
kernel run, then every wait object completed. On CUDA the matmul runs on the current stream while
the collective runs on its own; on CPU with Gloo the collective runs on Gloo's threads while the
matmul uses torch's intra-op threads, so the two compete for the same cores.

    overlap = (comm + compute - overlapped) / min(comm, compute), clipped to [0, 1]

1 is perfect hiding (overlapped = max(comm, compute)), 0 none (overlapped = comm + compute).
docs/overlap.md says how to read it and what it is not.
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
PROBE_SIDE = 128


def overlap_fraction(comm_us: float, compute_us: float, overlapped_us: float) -> float:
    """The share of the shorter of the two that was hidden behind the longer, in [0, 1]; NaN if unknown."""
    shorter = min(comm_us, compute_us)
    if not shorter > 0 or any(map(math.isnan, (comm_us, compute_us, overlapped_us))):
        return math.nan
    return min(1.0, max(0.0, (comm_us + compute_us - overlapped_us) / shorter))


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


def side_for(flops: float) -> int:
    """The square matmul side whose 2 n^3 FLOP is nearest to flops, within [MIN_SIDE, MAX_SIDE]."""
    return max(MIN_SIDE, min(MAX_SIDE, round((max(flops, 0.0) / 2.0) ** (1 / 3))))


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

    Each rank measures its own rate; the ranks agree on the largest FLOP count any of them wants
    (agree_max), so every rank runs the same kernel (and a rank on a slower core decides for all).
    """
    probe = ComputeKernel(PROBE_SIDE, device, compute_dtype(dtype))
    seconds_of(probe)  # warm: first calls pay for allocation and dispatch
    rate = probe.flops / max(min(seconds_of(probe) for _ in range(3)), 1e-9)
    return ComputeKernel(side_for(agree_max(target_s * rate)), device, compute_dtype(dtype))


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
