"""Execution Traces (`torch.profiler.ExecutionTraceObserver`, schema `1.x-chakra...`).

The "nodes" array is streamed; kept are the `record_param_comms` nodes (their attrs), else the
dispatcher ops `c10d::*` (their inputs' shapes, values and types: Gloo writes no
record_param_comms), the `ProfilerStep#N` nodes and the `## process_group:init ##` record. The order
of issue is the record-function id (`rf_id`), which counts record functions as they start. Lists are
never cut in this format; no time is recorded for a collective."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from commbench.errors import UserError
from commbench.replay.readers.comms import (
    EXECUTION_TRACE,
    comms_collective,
    comms_ops,
    dispatcher_collective,
    dispatcher_note,
)
from commbench.replay.readers.fields import (
    DISPATCHER_OPS,
    Damaged,
    arg,
    as_int,
    dtype_name,
    rank_count,
    rank_list,
    shown,
)
from commbench.replay.readers.format import Reader
from commbench.replay.readers.limits import LIMITS, Limits, Tally
from commbench.replay.readers.stream import JsonStream
from commbench.replay.record import Collective, Trace

FORMAT = "execution-trace"
PROCESS_GROUP_INIT = "## process_group:init ##"


def _attrs(node: dict[str, Any]) -> dict[str, Any]:
    attrs = node.get("attrs")
    if not isinstance(attrs, list):
        return {}
    return {a["name"]: a.get("value") for a in attrs if isinstance(a, dict) and isinstance(a.get("name"), str)}


def _process_groups(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The groups the `## process_group:init ##` node holds (JSON text in its first input value)."""
    inputs = node.get("inputs")
    values = inputs.get("values") if isinstance(inputs, dict) else None
    text = values[0] if isinstance(values, list) and values else None
    if not isinstance(text, str):
        return []
    try:
        groups = json.loads(text)
    except (ValueError, RecursionError):
        raise Damaged(f"the {PROCESS_GROUP_INIT} node's groups are no JSON") from None
    return [g for g in groups if isinstance(g, dict)] if isinstance(groups, list) else []


def _ranks_of(groups: list[dict[str, Any]]) -> dict[str, tuple[int, ...]]:
    """Each group's ranks by name: its rank list, else 0 .. its size - 1."""
    out = {}
    for g in groups:
        name = str(g.get("pg_name"))
        ranks = rank_list(g.get("ranks"), f"process group {shown(g.get('pg_name'))}'s ranks")[0]
        size = rank_count(g.get("group_size"), f"process group {shown(g.get('pg_name'))}'s group_size")
        out[name] = ranks or tuple(range(size or 0))
    return out


def read(path: Path, rank: int | None = None, limits: Limits = LIMITS) -> Trace:
    """Every collective of one Execution Trace in issue order. The format does not name its rank: it
    comes from the file's name (rank0, _1.json...) where load() finds one, else 0."""
    comms: list[tuple[int, dict[str, Any]]] = []
    dispatched: list[tuple[int, dict[str, Any], dict[str, Any]]] = []
    steps: list[tuple[int, int]] = []
    groups: list[dict[str, Any]] = []
    kept = Tally(limits, "collectives", path, "holds more than {} collectives and steps")
    with JsonStream(path, limits, keep=("nodes",)) as stream:
        for node in stream.items("nodes"):
            if not isinstance(node, dict):
                continue
            name = node.get("name")
            name = name if isinstance(name, str) else ""
            if name == "record_param_comms":
                attrs = _attrs(node)
                comms.append((as_int(attrs.get("rf_id")) or 0, attrs))
            elif name in DISPATCHER_OPS:
                attrs = _attrs(node)
                dispatched.append((as_int(attrs.get("rf_id")) or 0, node, attrs))
            elif name.startswith("ProfilerStep#") and (n := as_int(name.partition("#")[2] or 0)) is not None:
                steps.append((as_int(_attrs(node).get("rf_id")) or 0, n))
            elif name == PROCESS_GROUP_INIT and not groups:
                groups = _process_groups(node)
            else:
                continue
            kept.add()
        digest = stream.digest()
    if "nodes" in stream.meta:  # kept only where it is no array
        raise Damaged(f"nodes is {shown(stream.meta['nodes'])}, not a list of nodes")
    if not stream.count:
        raise UserError(
            f"{path}: an empty trace (no nodes); keep the ExecutionTraceObserver running over at least one step"
        )
    rank = rank or 0
    default = next((g for g in groups if g.get("pg_desc") == "default_pg"), groups[0] if groups else {})
    world = rank_count(default.get("group_size"), "the default process group's group_size") if default else None
    ranks_of = _ranks_of(groups)
    backend = str(default.get("backend_config", "")).rpartition(":")[2] if default else ""
    notes: list[str] = []
    if comms:
        collectives = _from_record_param_comms(path, comms, rank, notes)
    else:
        collectives = _from_dispatcher_ops(dispatched, ranks_of, str(default.get("pg_name", "0")), rank, world, notes)
    collectives.sort(key=lambda pair: pair[0])
    steps.sort()
    placed = []
    for rf, c in collectives:
        step = next((n for start, n in reversed(steps) if start <= rf), None)
        placed.append(Collective(**{**c.__dict__, "step": step}))
    return Trace(
        path=str(path),
        format=FORMAT,
        rank=rank,
        world_size=world,
        backend=backend,
        digest=digest,
        collectives=tuple(placed),
        steps=tuple(n for _, n in steps),
        notes=tuple(notes),
    )


def _from_record_param_comms(
    path: Path, comms: list[tuple[int, dict[str, Any]]], rank: int, notes: list[str]
) -> list[tuple[int, Collective]]:
    return [
        (
            rf,
            comms_collective(
                a, EXECUTION_TRACE, name, rank, seq=as_int(a.get("seq")) if a.get("seq") not in (None, -1) else None
            ),
        )
        for rf, a, name in comms_ops(path, comms, EXECUTION_TRACE, notes)
    ]


def _from_dispatcher_ops(
    nodes: list[tuple[int, dict[str, Any], dict[str, Any]]],
    ranks_of: dict[str, tuple[int, ...]],
    default: str,
    rank: int,
    world: int | None,
    notes: list[str],
) -> list[tuple[int, Collective]]:
    if not nodes:
        return []
    notes.append(dispatcher_note("their sizes and dtypes from the nodes' inputs"))
    ranks = ranks_of.get(default) or tuple(range(world or 0))
    out: list[tuple[int, Collective]] = []
    for rf, node, _ in nodes:
        spec = DISPATCHER_OPS[str(node["name"])]
        inputs = node.get("inputs") if isinstance(node.get("inputs"), dict) else {}
        types = inputs.get("types")
        dtype = dtype_name(str(arg(types, spec.inp) or "")) if spec.inp is not None else None
        shapes, values = inputs.get("shapes"), inputs.get("values")
        out.append((rf, dispatcher_collective(spec, shapes, values, dtype, default, ranks, rank)))
    return out


def _recognises(head: bytes) -> bool:
    return head.startswith(b"{") and (b'"nodes"' in head or (b'"schema"' in head and b"chakra" in head))


READER = Reader(FORMAT, _recognises, read)
