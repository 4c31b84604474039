"""What a rank's sweep will measure: every case of the sweep (op x dtype x point x variant x phase),
why a variant cannot run, each case's memory estimate, and the groups of cases whose buffers are
alive together while they rotate (commbench/run/rotation.py)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from commbench.ops import choose_variants, unavailable
from commbench.ops.args import CollArgs
from commbench.ops.base import Op
from commbench.ops.spec import Point
from commbench.results.schema import LAYOUT_KEY, key_without
from commbench.run.config import SweepConfig, op_points
from commbench.run.groups import Grouping
from commbench.run.harness import TimedCase
from commbench.run.resources import memory_case

if TYPE_CHECKING:
    import pandas as pd

# Cases are interleaved (rotated) in groups whose buffers are alive together. A group may hold this
# much, or the sweep's largest single case where that is more, so a rotation never needs more memory
# than the memory check allowed: small sizes rotate all together, the largest one at a time.
ROTATION_MEMORY_BYTES = 64 << 20


@dataclass(frozen=True)
class Variants:
    """An op's variants in one dtype on this group: those that run, and why each other one cannot."""

    runnable: list[str]
    refused: dict[str, str]


@dataclass
class RotationEntry:
    """A case in the rotation: its timed loop, and what its row and the ETA need besides."""

    case: TimedCase
    args: CollArgs
    s_bytes: int
    note: str
    work: int  # the case's memory estimate: its size as the ETA weighs it
    blocks: list[int] = field(default_factory=list)  # samples per round, planned at the first visit
    sample_s: float = 0.0


class SweepPlan:
    """The cases of a sweep on one rank's group. Each op's points are worked out once (op_points)."""

    def __init__(self, cfg: SweepConfig, grouping: Grouping, ops: Sequence[Op]) -> None:
        self.cfg, self.grouping, self.ops = cfg, grouping, list(ops)
        self.on_host = grouping.backend.device.type != "cuda"

    def points(self, op: Op) -> list[Point]:
        return op_points(op, self.cfg.sizes)

    def variants(self, op: Op, dtype: str) -> Variants:
        """The variants of the op that can run in dtype in this group, and why each of the others cannot."""
        torch_dtype = getattr(torch, dtype)
        backend = self.grouping.backend
        runnable, refused = [], {}
        for variant in choose_variants(op.variants, self.cfg.variants):
            reason = self.grouping.unavailable or unavailable(op, variant, backend, torch_dtype)
            if reason is None:
                runnable.append(variant)
            else:
                refused[variant] = reason
        return Variants(runnable, refused)

    def work(self, op: Op, dtype: str) -> Callable[[Point, str], int]:
        """A case's memory estimate, by (point, variant): how the ETA and the rotation weigh it."""
        world_size = self.grouping.backend.world_size

        def need(point: Point, variant: str) -> int:
            return op.memory_bytes(memory_case(op, variant, dtype, self.cfg, world_size, self.on_host), point)

        return need

    def cases(self) -> list[tuple[str, int]]:
        """(op, work) of every case the sweep plans, before sizes that round to one another are merged
        and before the transport refuses any; work is the case's memory estimate, which grows with it."""
        return [(op.name, work) for op, _, _, work in self.planned()]

    def planned(self) -> Iterator[tuple[Op, tuple[str, ...], Point, int]]:
        """Every planned case: its op, its PRIOR_KEY (the row key without the mode, the size and the
        layout: op, variant, phase, dtype), its point and its work."""
        for op in self.ops:
            for dtype in self.cfg.dtypes:
                need, variants = self.work(op, dtype), self.variants(op, dtype).runnable
                for point in self.points(op):
                    for variant in variants:
                        work = need(point, variant)
                        for phase in op.phases:
                            cells = {"op": op.name, "variant": variant, "phase": phase, "dtype": dtype}
                            yield op, tuple(cells[c] for c in PRIOR_KEY), point, work

    def rotation_groups(self, op: Op, dtype: str, variants: list[str]) -> list[list[tuple[Point, str]]]:
        """The op's (point, variant) cases in dtype, cut into groups that rotate together."""
        return rotation_groups(self.points(op), variants, self.work(op, dtype))


def rotation_groups(
    points: list[Point], variants: list[str], need: Callable[[Point, str], int]
) -> list[list[tuple[Point, str]]]:
    """(point, variant) pairs in sweep order, cut into consecutive groups that fit the rotation memory;
    need(point, variant) is a case's memory estimate (Op.memory_bytes)."""
    pairs = [(point, variant) for point in points for variant in variants]
    if not pairs:
        return []
    needs = {(p.label, v): need(p, v) for p, v in pairs}
    cap = max(ROTATION_MEMORY_BYTES, *needs.values())
    groups: list[list[tuple[Point, str]]] = [[]]
    held = 0
    for point, variant in pairs:
        if groups[-1] and held + needs[point.label, variant] > cap:
            groups.append([])
            held = 0
        groups[-1].append((point, variant))
        held += needs[point.label, variant]
    return groups


# What an earlier run's row must share with a planned case to be its prior: the row key without the
# size (matched to the nearest), the mode and the layout (the same fingerprint implies them).
PRIOR_KEY = key_without("mode", "size_bytes", *LAYOUT_KEY)


def eta_prior(plan: SweepPlan, rows: pd.DataFrame) -> dict[tuple[str, int], float]:
    """Seconds per sample of each planned (op, work) as an earlier run's rows measured them (their
    p50 at the same op, variant, phase and dtype, at the nearest size within 2x), for the ETA."""
    curves: dict[tuple, list[tuple[int, float]]] = {}
    for row in rows.itertuples(index=False):
        p50 = float(row.time_us_p50)
        if row.status == "ok" and p50 > 0:
            key = tuple(getattr(row, c) for c in PRIOR_KEY)
            curves.setdefault(key, []).append((int(row.size_bytes), p50 * 1e-6))
    found: dict[tuple[str, int], list[float]] = {}
    for op, key, point, work in plan.planned():
        near = [(abs(math.log(s / point.size_bytes)), t) for s, t in curves.get(key, []) if s > 0 < point.size_bytes]
        if near and min(near)[0] <= math.log(2):
            found.setdefault((op.name, work), []).append(min(near)[1])
    return {case: statistics.fmean(times) for case, times in found.items()}
