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
from commbench.replay.readers.fields import (
    DISPATCHER_OPS,
    NO_PROCESS_GROUP,
    arg,
    as_int,
    count_tensors,
    dtype_name,
    int_list,
    numel,
)
from commbench.replay.readers.kineto import NO_SIZES, NOT_COLLECTIVES
from commbench.replay.readers.stream import JsonStream
from commbench.replay.record import Collective, Trace

FORMAT = "execution-trace"
PROCESS_GROUP_INIT = "## process_group:init ##"


def _attrs(node: dict[str, Any]) -> dict[str, Any]:
    return {a.get("name"): a.get("value") for a in node.get("attrs") or () if isinstance(a, dict)}


def read(path: Path, rank: int | None = None) -> Trace:
    """Every collective of one Execution Trace in issue order. The format does not name its rank: it
    comes from the file's name (rank0, _1.json...) where load() finds one, else 0."""
    stream = JsonStream(path)
    comms: list[tuple[int, dict[str, Any]]] = []
    dispatched: list[tuple[int, dict[str, Any], dict[str, Any]]] = []
    steps: list[tuple[int, int]] = []
    groups: list[dict[str, Any]] = []
    count = 0
    try:
        for node in stream.items("nodes"):
            count += 1
            if not isinstance(node, dict):
                continue
            name = str(node.get("name", ""))
            if name == "record_param_comms":
                attrs = _attrs(node)
                comms.append((as_int(attrs.get("rf_id")) or 0, attrs))
            elif name in DISPATCHER_OPS:
                attrs = _attrs(node)
                dispatched.append((as_int(attrs.get("rf_id")) or 0, node, attrs))
            elif name.startswith("ProfilerStep#"):
                steps.append((as_int(_attrs(node).get("rf_id")) or 0, int(name.partition("#")[2] or 0)))
            elif name == PROCESS_GROUP_INIT and not groups:
                values = (node.get("inputs") or {}).get("values") or []
                try:
                    groups = [g for g in json.loads(values[0]) if isinstance(g, dict)] if values else []
                except (TypeError, ValueError):
                    groups = []
        digest = stream.digest()
    finally:
        stream.close()
    if not count:
        raise UserError(
            f"{path}: an empty trace (no nodes); keep the ExecutionTraceObserver running over at least one step"
        )
    rank = rank or 0
    default = next((g for g in groups if g.get("pg_desc") == "default_pg"), groups[0] if groups else {})
    world = as_int(default.get("group_size")) if default else None
    ranks_of = {str(g.get("pg_name")): tuple(g.get("ranks") or range(as_int(g.get("group_size")) or 0)) for g in groups}
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
    if not any("in_msg_nelems" in a for _, a in comms):
        raise UserError(NO_SIZES.format(path=path))
    out: list[tuple[int, Collective]] = []
    skipped = 0
    for rf, a in comms:
        name = str(a.get("collective_name", "")).lower()
        if name in NOT_COLLECTIVES or not name:
            skipped += 1
            continue
        lossy: list[str] = []
        dtype = dtype_name(str(a.get("dtype", "")))
        if dtype is None:
            lossy.append(f"dtype {a.get('dtype')!r} unknown (float32 assumed)")
        size, start, stride = (
            as_int(a.get("pg_size")) or 0,
            as_int(a.get("global_rank_start")),
            as_int(a.get("global_rank_stride")),
        )
        ranks = tuple(start + i * stride for i in range(size)) if start is not None and stride else ()
        peer = as_int(a.get("dst_rank") if name == "send" else a.get("src_rank"))
        out.append(
            (
                rf,
                Collective(
                    name=name,
                    dtype=dtype or "float32",
                    in_elems=as_int(a.get("in_msg_nelems")) or 0,
                    out_elems=as_int(a.get("out_msg_nelems")) or 0,
                    group=str(a.get("pg_name", "")),
                    group_ranks=ranks,
                    rank=rank,
                    in_splits=int_list(a.get("in_split_size"))[0],
                    out_splits=int_list(a.get("out_split_size"))[0],
                    peer=peer if peer is not None and peer >= 0 else None,
                    seq=as_int(a.get("seq")) if a.get("seq") not in (None, -1) else None,
                    group_desc=str(a.get("pg_desc", "")),
                    lossy=tuple(lossy),
                ),
            )
        )
    if skipped:
        notes.append(f"{skipped} wait/coalescing entries skipped (they wait on collectives, they are none)")
    return out


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
    notes.append(
        "no record_param_comms in this trace (a backend that writes none, such as Gloo): collectives read "
        "from the dispatcher ops c10d::*, their sizes and dtypes from the nodes' inputs"
    )
    ranks = ranks_of.get(default) or tuple(range(world or 0))
    out: list[tuple[int, Collective]] = []
    for rf, node, _ in nodes:
        spec = DISPATCHER_OPS[str(node["name"])]
        inputs = node.get("inputs") or {}
        shapes, values, types = inputs.get("shapes") or [], inputs.get("values") or [], inputs.get("types") or []
        lossy = [NO_PROCESS_GROUP]
        dtype = dtype_name(str(arg(types, spec.inp) or "")) if spec.inp is not None else None
        if dtype is None and spec.inp is not None:
            lossy.append("dtype not recorded (float32 assumed)")
        in_shape = arg(shapes, spec.inp)
        out_shape = arg(shapes, spec.out) if spec.out is not None else in_shape
        in_splits: tuple[int, ...] = ()
        out_splits: tuple[int, ...] = ()
        if spec.splits:
            out_splits = int_list(arg(values, spec.splits[0]))[0]
            in_splits = int_list(arg(values, spec.splits[1]))[0]
        root = as_int(arg(values, spec.root)) if spec.root is not None else None
        if spec.root is not None and root is None:
            lossy.append("root/peer not recorded")
        peer = ranks[root] if root is not None and ranks and 0 <= root < len(ranks) else root
        out.append(
            (
                rf,
                Collective(
                    name=spec.name,
                    dtype=dtype or "float32",
                    in_elems=numel(in_shape),
                    out_elems=numel(out_shape),
                    group=default,
                    group_ranks=tuple(ranks),
                    rank=rank,
                    in_splits=in_splits,
                    out_splits=out_splits,
                    peer=peer,
                    coalesced=count_tensors(in_shape) if "coalesced" in spec.name else None,
                    lossy=tuple(lossy),
                ),
            )
        )
    return out
