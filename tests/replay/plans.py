"""Hand-built Plans for the replay's tests, as the mapping (commbench/replay/mapping.py) makes them."""

from __future__ import annotations

import dataclasses

from commbench.replay.record import Call, Collective, Plan, Unmapped

ALL_REDUCE = Call("all_reduce", "flat", "float32", 1000, 1000, (0, 1))
ALL_GATHER = Call("all_gather", "flat", "float32", 300, 600, (0, 1))
REDUCE_SCATTER = Call("reduce_scatter_base", "flat", "bfloat16", 600, 300, (0, 1))
BROADCAST = Call("broadcast", "flat", "float32", 77, 77, (0, 1), peer=1)
ALL_TO_ALL = Call("all_to_all", "uneven", "float32", 40, 60, (0, 1), splits=((10, 30), (30, 20)))
WAIT_FREE = Collective("_allgather_base_coalesced", "float32", 8, 16, "0", (0, 1), 0, recorded_us=50.0)
DIGEST = "d1gest0000000000"


def plan_of(sequence: list[Call], world_size: int = 2, steps: int = 1, unmapped: tuple[Unmapped, ...] = ()) -> Plan:
    """A plan of one step's sequence: the counts from it, each call recorded at 100 us + its index."""
    counts: dict[Call, int] = {}
    for call in sequence:
        counts[call] = counts.get(call, 0) + 1
    recorded = tuple((c, tuple(100.0 + i for i in range(n * steps))) for c, n in counts.items())
    return Plan(world_size, tuple(sequence), tuple(counts.items()), recorded, unmapped, steps, DIGEST)


def fsdp_like() -> Plan:
    """A step as FSDP issues it: broadcast of the state, all_gathers, reduce_scatters, an all_reduce;
    its calls (601 us added up) partly overlapping, so the step's communication ran 480 us."""
    sequence = [BROADCAST, ALL_GATHER, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, ALL_REDUCE]
    plan = plan_of(sequence, unmapped=(Unmapped(WAIT_FREE, "no op for coalesced all_gather_base"),))
    return dataclasses.replace(plan, recorded_wall_us=(480.0,))


def tensor_parallel() -> Plan:
    """Four ranks: all_reduce within the pairs (0, 1) and (2, 3), then all_gather over all four."""
    pair_a = Call("all_reduce", "flat", "float32", 512, 512, (0, 1))
    pair_b = Call("all_reduce", "flat", "float32", 512, 512, (2, 3))
    everyone = Call("all_gather", "flat", "float32", 64, 256, (0, 1, 2, 3))
    return plan_of([pair_a, pair_b, everyone, pair_a], world_size=4)


def uneven_shards() -> Plan:
    """A reduce_scatter whose 601 elements cannot be sharded over 2 ranks: no op can issue it exactly."""
    return plan_of([Call("reduce_scatter_base", "flat", "float32", 601, 300, (0, 1))])
