"""A Plan as JSON-able data and back: how it travels to the ranks in SweepConfig.program_options."""

from __future__ import annotations

import dataclasses
from typing import Any

from commbench.replay.record import Call, Collective, Plan, Unmapped


def _tuples(value: Any) -> Any:
    """JSON's lists back as the tuples the frozen records hold (nested: splits)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _call(data: dict[str, Any]) -> Call:
    return Call(**{k: _tuples(v) for k, v in data.items()})


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    calls = list(dict.fromkeys([*plan.sequence, *(c for c, _ in plan.counts), *(c for c, _ in plan.recorded_us)]))
    index = {c: i for i, c in enumerate(calls)}
    return {
        "world_size": plan.world_size,
        "calls": [dataclasses.asdict(c) for c in calls],
        "sequence": [index[c] for c in plan.sequence],
        "counts": [[index[c], n] for c, n in plan.counts],
        "recorded_us": [[index[c], list(times)] for c, times in plan.recorded_us],
        "unmapped": [{"collective": dataclasses.asdict(u.collective), "reason": u.reason} for u in plan.unmapped],
        "steps": plan.steps,
        "digest": plan.digest,
        "notes": list(plan.notes),
        "recorded_wall_us": list(plan.recorded_wall_us),
    }


def plan_from_dict(data: dict[str, Any]) -> Plan:
    calls = [_call(c) for c in data["calls"]]
    return Plan(
        world_size=int(data["world_size"]),
        sequence=tuple(calls[i] for i in data["sequence"]),
        counts=tuple((calls[i], int(n)) for i, n in data["counts"]),
        recorded_us=tuple((calls[i], tuple(float(t) for t in times)) for i, times in data["recorded_us"]),
        unmapped=tuple(
            Unmapped(Collective(**{k: _tuples(v) for k, v in u["collective"].items()}), u["reason"])
            for u in data["unmapped"]
        ),
        steps=int(data["steps"]),
        digest=str(data["digest"]),
        notes=tuple(data["notes"]),
        recorded_wall_us=tuple(float(w) for w in data.get("recorded_wall_us", ())),
    )
