"""A Plan onto the launch's ranks: as recorded where the launch is large enough, refused where it is
too small, or scaled (--scale) by one stated rule."""

from __future__ import annotations

import dataclasses

from commbench.errors import UserError
from commbench.replay.record import Call, Plan

SCALE_RULE = (
    "--scale: a recorded group of k ranks starting at rank g runs on min(k, {world}) consecutive ranks "
    "from g mod {world} (wrapping), each rank sending its recorded element count"
)


def too_small(plan: Plan, world: int) -> str:
    return (
        f"the trace's groups need {plan.world_size} ranks and this launch has {world}: "
        f"launch {plan.world_size} ranks (--nproc {plan.world_size}), or pass --scale to fit the groups onto {world}"
    )


def fit(plan: Plan, world: int, scale: bool) -> tuple[Plan, str]:
    """The plan on `world` ranks and the line that says how it was placed."""
    if world >= plan.world_size:
        idle = world - plan.world_size
        extra = f"; ranks {plan.world_size}-{world - 1} sit every call out" if idle else ""
        return plan, f"groups as recorded on {plan.world_size} of the {world} ranks{extra}"
    if not scale:
        raise UserError(too_small(plan, world))
    mapped = {call: scaled(call, world) for call, _ in plan.counts}
    for call in plan.sequence:
        mapped.setdefault(call, scaled(call, world))
    fitted = dataclasses.replace(
        plan,
        world_size=world,
        sequence=tuple(mapped[c] for c in plan.sequence),
        counts=merged([(mapped[c], n) for c, n in plan.counts]),
        recorded_us=joined([(mapped[c], times) for c, times in plan.recorded_us]),
    )
    return fitted, SCALE_RULE.format(world=world)


def merged(counts: list[tuple[Call, int]]) -> tuple[tuple[Call, int], ...]:
    """Counts of calls that scaling made identical, added up (first-seen order)."""
    total: dict[Call, int] = {}
    for call, n in counts:
        total[call] = total.get(call, 0) + n
    return tuple(total.items())


def joined(recorded: list[tuple[Call, tuple[float, ...]]]) -> tuple[tuple[Call, tuple[float, ...]], ...]:
    """Recorded times of calls that scaling made identical, pooled (first-seen order)."""
    pooled: dict[Call, tuple[float, ...]] = {}
    for call, times in recorded:
        pooled[call] = pooled.get(call, ()) + tuple(times)
    return tuple(pooled.items())


def placed(group: tuple[int, ...], world: int) -> tuple[int, ...]:
    """The launch ranks of a recorded group under --scale (SCALE_RULE)."""
    size = min(len(group), world)
    first = min(group) % world
    return tuple(sorted((first + i) % world for i in range(size)))


def scaled(call: Call, world: int) -> Call:
    """The call on its placed group. A root or peer keeps its place in the group where the group keeps
    it; all_to_all splits are folded (recorded rank r's traffic is rank r mod k's)."""
    ranks = placed(call.group_ranks, world)
    k = len(ranks)
    peer = None if call.peer is None else call.peer % k
    splits = call.splits
    if splits and len(splits) != k:
        folded = [[0] * k for _ in range(k)]
        for src, row in enumerate(splits):
            for dst, n in enumerate(row):
                folded[src % k][dst % k] += n
        splits = tuple(tuple(row) for row in folded)
    return dataclasses.replace(call, group_ranks=ranks, peer=peer, splits=splits)
