"""Small trace files written in the formats PyTorch writes, for reader and error tests: a Kineto
Chrome trace with record_param_comms events, and a Flight Recorder dump (pickle or JSON) in the
layout torch.distributed's _dump_fr_trace / _dump_fr_trace_json write (torch 2.13, version "2.10")."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any


def comm(
    name: str, elems: int, ts: float, *, out: int | None = None, dtype: str = "Float", ext: int = 0, **extra: Any
) -> dict:
    """A record_param_comms CPU op as Kineto writes it (torch 2.x NCCL)."""
    args = {
        "External id": ext,
        "Collective name": name,
        "In msg nelems": elems,
        "Out msg nelems": elems if out is None else out,
        "Group size": 2,
        "dtype": dtype,
        "In split size": "[]",
        "Out split size": "[]",
        "Process Group Name": "0",
        "Process Group Description": "default_pg",
        "Process Group Ranks": "[0, 1]",
        **extra,
    }
    return {
        "ph": "X",
        "cat": "cpu_op",
        "name": "record_param_comms",
        "pid": 1,
        "tid": 1,
        "ts": ts,
        "dur": 5,
        "args": args,
    }


def step(n: int, ts: float, dur: float) -> dict:
    return {
        "ph": "X",
        "cat": "user_annotation",
        "name": f"ProfilerStep#{n}",
        "pid": 1,
        "tid": 1,
        "ts": ts,
        "dur": dur,
        "args": {},
    }


def compute(ts: float) -> dict:
    return {
        "ph": "X",
        "cat": "cpu_op",
        "name": "aten::mm",
        "pid": 1,
        "tid": 1,
        "ts": ts,
        "dur": 3,
        "args": {"External id": 99},
    }


def kineto(path: Path, events: list[dict], *, rank: int = 0, world: int = 2, backend: str = "nccl") -> Path:
    info = {
        "backend": backend,
        "rank": rank,
        "world_size": world,
        "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": world, "ranks": list(range(world))}],
    }
    path.write_text(json.dumps({"schemaVersion": 1, "distributedInfo": info, "traceEvents": events}))
    return path


def fr_entry(
    name: str,
    sizes: list[list[int]],
    seq: int,
    *,
    out: list[list[int]] | None = None,
    dtype: str = "Float",
    group: str = "0",
    ms: float | None = None,
) -> dict:
    entry = {
        "record_id": seq - 1,
        "pg_id": 0,
        "process_group": (group, "default_pg"),
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "profiling_name": name,
        "time_created_ns": 1_000_000 * seq,
        "input_sizes": sizes,
        "input_dtypes": [dtype] * len(sizes),
        "output_sizes": sizes if out is None else out,
        "output_dtypes": [dtype] * len(sizes),
        "state": "completed",
        "retired": True,
        "timeout_ms": 60000,
        "is_p2p": False,
    }
    if ms is not None:
        entry["duration_ms"] = ms
    return entry


# what ProcessGroupGloo writes as pg_config once a job has made a second group (torch 2.13)
GLOO_PG_CONFIG = {"": {"name": "", "desc": "", "ranks": "[]"}}


def flight_recorder(
    path: Path, entries: list[dict], *, ranks: str = "[0, 1]", as_json: bool = False, pg_config: Any = None
) -> Path:
    dump = {
        "version": "2.10",
        "pg_config": pg_config or {"0": {"name": "0", "desc": "default_pg", "ranks": ranks}},
        "pg_status": {"0": {"last_enqueued_collective": len(entries)}},
        "comm_lib_version": "",
        "entries": entries,
    }
    if as_json:
        path.write_text(
            json.dumps({**dump, "entries": [{**e, "process_group": list(e["process_group"])} for e in entries]})
        )
    else:
        path.write_bytes(pickle.dumps(dump))
    return path
