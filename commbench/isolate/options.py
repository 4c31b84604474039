"""`commbench isolate`'s own options, as they travel to the ranks inside the sweep configuration."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from commbench.errors import UserError
from commbench.isolate.screens import DEFAULT_SCREEN, SCREENS
from commbench.isolate.verdict import DEFAULT_THRESHOLD, NOISE_K

# The rank program `commbench isolate` names in its SweepConfig (SweepConfig.program).
ISOLATE_PROGRAM = "commbench.isolate.node_sweep:isolate_rank"
LATENCY_BYTES = 8
PROBE_SIZES = tuple(64 * 1024 * 4**k for k in range(6))  # 64K .. 64M
# The probe takes the first size whose exchange takes this many times the latency size's: the
# fixed cost is then under a tenth of the time, and the pair's bandwidth dominates.
BANDWIDTH_BOUND = 10.0
PROBE_MAX_S = 0.05  # ... or the first that takes this long (a slow cluster must not probe for minutes)
# --rails: auto, or interface names (Linux allows up to 15 characters, none of them '/' or space).
RAILS = re.compile(r"auto|[A-Za-z0-9_.:@-]{1,15}(,[A-Za-z0-9_.:@-]{1,15})*")


@dataclass(frozen=True)
class IsolateOptions:
    """size: the bandwidth-bound size in bytes (None: chosen by a probe); threshold: the share of
    the median a score must fall below it by; k: the noise bound's multiple of 1.4826 x MAD;
    screen: the pair screen's name (screens.SCREENS); rails: None, "auto" (the transport picks
    each rank's NIC) or the interfaces local ranks 0, 1, ... bind their exchanges to ("eth0,eth1")."""

    size: int | None = None
    latency_size: int = LATENCY_BYTES
    threshold: float = DEFAULT_THRESHOLD
    k: float = NOISE_K
    bisect: bool = False
    screen: str = DEFAULT_SCREEN
    rails: str | None = None

    def __post_init__(self) -> None:
        if not 0 < self.threshold < 1:
            raise UserError(f"--threshold must lie between 0% and 100%, e.g. 20% (got {self.threshold * 100:g}%)")
        if self.size is not None and self.size <= self.latency_size:
            raise UserError(f"--size must be more than {self.latency_size} bytes to measure bandwidth, e.g. 4M")
        if self.screen not in SCREENS:
            raise UserError(f"--screen {self.screen!r} is no screen; choose one of {', '.join(SCREENS)}")
        if self.rails is not None and not RAILS.fullmatch(self.rails):
            raise UserError(
                f"--rails takes auto or the interfaces of local ranks 0, 1, ... such as eth0,eth1 (got {self.rails!r})"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IsolateOptions:
        return cls(**data)
