"""A Plan onto the launch's ranks: as recorded where the launch has the job's own world size,
refused where it has another, or placed (--scale) by one stated rule: shrunk onto fewer ranks
(SCALE_RULE), grown onto more (GROW_RULE). A larger launch never runs the job's groups on some of
its ranks while its output speaks of all of them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from commbench.errors import UserError
from commbench.replay.record import Call, Plan

SCALE_RULE = (
    "--scale: a recorded group of k ranks starting at rank g runs on min(k, {world}) consecutive ranks "
    "from g mod {world} (wrapping), each rank sending its recorded element count"
)


GROW_RULE = (
    "--scale: the trace's {recorded}-rank job on {world} ranks: a recorded group over all {recorded} ranks runs "
    "over all {world}, each rank sending its recorded element count; smaller groups run as recorded"
)


def too_large(plan: Plan, world: int) -> str:
    return (
        f"the trace's job ran on {plan.world_size} ranks and this launch has {world}: launch {plan.world_size} "
        f"ranks (--nproc {plan.world_size}), or pass --scale to run its groups over all {plan.world_size} ranks "
        f"on all {world}"
    )


def too_small(plan: Plan, world: int) -> str:
    return (
        f"the trace's groups need {plan.world_size} ranks and this launch has {world}: "
        f"launch {plan.world_size} ranks (--nproc {plan.world_size}), or pass --scale to fit the groups onto {world}"
    )


def fit(plan: Plan, world: int, scale: bool) -> tuple[Plan, str]:
    """The plan on `world` ranks and the line that says how it was placed."""
    if world == plan.world_size:
        return plan, f"groups as recorded on {world} ranks"
    if not scale:
        raise UserError(too_small(plan, world) if world < plan.world_size else too_large(plan, world))
    if world > plan.world_size:
        recorded = tuple(range(plan.world_size))
        return _mapped(plan, world, lambda call: grown(call, recorded, world)), GROW_RULE.format(
            recorded=plan.world_size, world=world
        )
    return _mapped(plan, world, lambda call: scaled(call, world)), SCALE_RULE.format(world=world)


def _mapped(plan: Plan, world: int, rule: Callable[[Call], Call]) -> Plan:
    """The plan with every call placed by `rule` (calls it makes identical counted together)."""
    mapped = {call: rule(call) for call in dict.fromkeys([*plan.calls(), *(c for c, _ in plan.counts)])}
    return dataclasses.replace(
        plan,
        world_size=world,
        sequence=tuple(mapped[c] for c in plan.sequence),
        counts=merged([(mapped[c], n) for c, n in plan.counts]),
        recorded_us=joined([(mapped[c], times) for c, times in plan.recorded_us]),
        step_sequences=tuple(tuple(mapped[c] for c in seq) for seq in plan.step_sequences),
    )


def grown(call: Call, recorded: tuple[int, ...], world: int) -> Call:
    """The call on a launch larger than the job: over every rank where the job issued it over every
    rank (GROW_RULE), as recorded elsewhere. An uneven all_to_all's matrix names each rank's peers:
    it cannot grow, and is refused."""
    if tuple(sorted(call.group_ranks)) != recorded:
        return call
    if call.splits:
        raise UserError(
            f"--scale cannot grow an uneven all_to_all over all {len(recorded)} ranks onto {world}: its splits "
            f"name each of the {len(recorded)} ranks' peers; launch {len(recorded)} ranks (--nproc {len(recorded)})"
        )
    return dataclasses.replace(call, group_ranks=tuple(range(world)))


def merged(counts: list[tuple[Call, int | float]]) -> tuple[tuple[Call, int | float], ...]:
    """Counts of calls that scaling made identical, added up (first-seen order)."""
    total: dict[Call, int | float] = {}
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
