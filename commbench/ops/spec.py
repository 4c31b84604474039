"""An op's spec: everything about it that is known without running it (what `commbench list`,
`--help`, the runner and the charts read), and the workloads it measures (`Point`).

Op modules import torch lazily (`commbench.lazy`), so reading specs never loads it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from commbench.ops.cost import Cost
from commbench.ops.options import OpOption
from commbench.units import format_size


@dataclass(frozen=True)
class BusFactor:
    """busbw = algbw x factor(n), nccl-tests' normalisation; `text` is how `commbench list` shows it."""

    text: str
    factor: Callable[[int], float]

    def __call__(self, world_size: int) -> float:
        return self.factor(world_size)


GATHER_FACTOR = BusFactor("(n-1)/n", lambda n: (n - 1) / n)
REDUCE_FACTOR = BusFactor("2(n-1)/n", lambda n: 2 * (n - 1) / n)
UNIT_FACTOR = BusFactor("1", lambda n: 1.0)


@dataclass(frozen=True)
class Recorded:
    """How a trace's record of one of this op's collectives is issued again (`commbench replay`), in
    the plain counts every trace format records (ops/ knows nothing of traces or their readers).

    names: the recorded names (record_param_comms' "Collective name", a c10d dispatcher op's, a
        Flight Recorder entry's) of the collectives this op issues again, each with its variant.
    s_elements(in_elems, out_elems, n): S in elements from one rank's recorded counts on a group of n.
    even: the variants whose per-rank input must split evenly over the group.
    same_counts: every rank records the same counts (an all_to_all's, a gather's, a send's differ).
    reduces: it reduces, with an op no trace records (sum is assumed).
    peer: it has a peer rank (send/recv); a root is a RootedOp's (ops/rooted.py).
    """

    names: Mapping[str, str]
    s_elements: Callable[[int, int, int], int]
    even: tuple[str, ...] = ()
    same_counts: bool = True
    reduces: bool = False
    peer: bool = False


# S from recorded counts: the input (all_reduce, broadcast...), or the input on every rank gathered.
INPUT: Callable[[int, int, int], int] = lambda inp, out, n: inp  # noqa: E731
GATHERED: Callable[[int, int, int], int] = lambda inp, out, n: inp * n  # noqa: E731


@dataclass(frozen=True)
class OpSpec:
    """Everything about an op that is known without running it."""

    name: str
    summary: str
    s_definition: str
    bus_factor: BusFactor | None  # None: latency only (S = 0), algbw and busbw are left empty
    variants: tuple[str, ...]
    phases: tuple[str, ...] = ("comm",)
    # The variant the others are measured against in speedup charts; None: no speedup chart.
    baseline: str | None = None
    # The CSV column that says two rows did the same work (their x axis), and its name on charts:
    # S for most ops; the channel count for sync_bn, whose strategies move different bytes per layer.
    workload_column: str = "size_bytes"
    workload_name: str = "S"
    # The options that set the op's workload, named when a workload cannot fit in memory.
    workload_knobs: str = "--max-bytes or --sizes"
    options: tuple[OpOption, ...] = ()
    # How T scales with n for `commbench model`'s projections (docs/model.md lists the sources).
    cost: Cost = Cost()  # noqa: RUF009 (frozen, so one shared default is safe)
    # The variants that wait for their own collectives inside issue() (a bucketer's flush, a layer
    # that needs its gathered statistics), so non-blocking mode cannot overlap them.
    completes_internally: Callable[[str], bool] = lambda variant: False
    # How `commbench replay` issues a trace's collectives through this op; None: it replays none.
    recorded: Recorded | None = None

    def window_for(self, variant: str, window_per_sample: int) -> int:
        """Ops per timed sample: the non-blocking window, or 1 where the variant waits inside issue()."""
        return 1 if self.completes_internally(variant) else window_per_sample


@dataclass(frozen=True)
class Point:
    """One workload an op measures: how it is named, its S in bytes as requested, and the op's own
    parameters (a channel count, say). Used by the memory check, progress, the table and errors."""

    label: str
    size_bytes: int
    params: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def of_size(cls, size_bytes: int) -> Point:
        return cls(format_size(size_bytes), size_bytes)


def elements_for(size_bytes: int, element_size: int, multiple: int) -> int:
    """The element count nearest to size_bytes that is a positive multiple of `multiple`."""
    units = max(1, round(size_bytes / element_size / multiple))
    return units * multiple
