"""`commbench isolate`'s own options, as they travel to the ranks inside the sweep configuration."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from commbench.errors import UserError
from commbench.isolate.verdict import DEFAULT_THRESHOLD, NOISE_K

# The rank program `commbench isolate` names in its SweepConfig (SweepConfig.program).
ISOLATE_PROGRAM = "commbench.isolate.node_sweep:isolate_rank"
LATENCY_BYTES = 8
PROBE_SIZES = tuple(64 * 1024 * 4**k for k in range(6))  # 64K .. 64M
# The probe takes the first size whose exchange takes this many times the latency size's: the
# fixed cost is then under a tenth of the time, and the pair's bandwidth dominates.
BANDWIDTH_BOUND = 10.0
PROBE_MAX_S = 0.05  # ... or the first that takes this long (a slow cluster must not probe for minutes)


@dataclass(frozen=True)
class IsolateOptions:
    """size: the bandwidth-bound size in bytes (None: chosen by a probe); threshold: the share of
    the median a score must fall below it by; k: the noise bound's multiple of 1.4826 x MAD."""

    size: int | None = None
    latency_size: int = LATENCY_BYTES
    threshold: float = DEFAULT_THRESHOLD
    k: float = NOISE_K
    bisect: bool = False
    json: str | None = None

    def __post_init__(self) -> None:
        if not 0 < self.threshold < 1:
            raise UserError(f"--threshold must lie between 0% and 100%, e.g. 20% (got {self.threshold * 100:g}%)")
        if self.size is not None and self.size <= self.latency_size:
            raise UserError(f"--size must be more than {self.latency_size} bytes to measure bandwidth, e.g. 4M")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IsolateOptions:
        return cls(**data)
