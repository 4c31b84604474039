"""Flight Recorder dumps (`TORCH_FR_BUFFER_SIZE=N`, dumped on a timeout or by
`torch._C._distributed_c10d._dump_fr_trace()` / `_dump_fr_trace_json()`), pickle or JSON.

A dump is small (a ring buffer of the last N entries), so it is read whole. Each entry gives the
op (`profiling_name`, "nccl:all_reduce", "gloo:broadcast", "nccl:send 0->1"), its tensors' sizes and
dtypes, its process group and `collective_seq_id`; `duration_ms` where timing was on. It records no
root, no all-to-all splits and no profiler step."""

from __future__ import annotations

import hashlib
import io
import json
import pickle
import re
from pathlib import Path
from typing import Any

from commbench.errors import UserError
from commbench.replay.readers.comms import NOT_COLLECTIVES
from commbench.replay.readers.fields import as_int, dtype_name, int_list, numel
from commbench.replay.readers.stream import cut_short, opened
from commbench.replay.record import Collective, Trace

FORMAT = "flight-recorder"
RING_BUFFER = "a Flight Recorder dump holds the last entries of a ring buffer (TORCH_FR_BUFFER_SIZE), not the whole job"

# profiling_name's op (after "nccl:"/"gloo:") in record_param_comms' words
_NAMES = {
    "all_reduce": "allreduce",
    "all_reduce_coalesced": "allreduce_coalesced",
    "all_gather": "allgather",
    "all_to_all": "alltoall_base",
    "reduce_scatter": "reduce_scatter",
}


class _PlainData(pickle.Unpickler):
    """A dump holds dicts, lists, tuples, strings and numbers only: a pickle that names any class
    (which would run its code on load) is no dump and is refused, never loaded."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"it names {module}.{name}, which no Flight Recorder dump holds")


def parse(data: bytes, path: Path) -> dict[str, Any]:
    """The dump's dict, from pickle (torch's default) or JSON."""
    try:
        dump = _PlainData(io.BytesIO(data)).load() if data[:1] == b"\x80" else json.loads(data)
    except pickle.UnpicklingError as exc:
        if "Flight Recorder" in str(exc):
            raise UserError(
                f"{path}: not a trace ({exc}); give a profiler trace, an Execution Trace or a Flight Recorder dump"
            ) from None
        raise cut_short(path, exc) from None
    except (EOFError, ValueError) as exc:
        raise cut_short(path, exc) from None
    if not isinstance(dump, dict) or "entries" not in dump:
        raise UserError(
            f"{path}: not a trace (no Flight Recorder entries); give a profiler trace, an Execution Trace or a Flight Recorder dump"
        )
    return dump


def _ranks_by_group(pg_config: Any) -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {}
    for key, cfg in (pg_config or {}).items():
        if isinstance(cfg, dict):
            ranks = int_list(cfg.get("ranks"))[0]
            out[str(key)] = ranks
            out[str(cfg.get("name", key))] = ranks
    return out


def read(path: Path, rank: int | None = None, data: bytes | None = None) -> Trace:
    """Every entry of one dump that is a collective, in the order the ring buffer holds them."""
    if data is None:
        try:
            with opened(path) as f:
                data = f.read()
        except (OSError, EOFError) as exc:
            raise cut_short(path, exc) from None
    dump = parse(data, path)
    if not dump.get("entries"):
        raise UserError(
            f"{path}: an empty trace (a Flight Recorder dump with no entries); dump it after the job issued collectives"
        )
    groups = _ranks_by_group(dump.get("pg_config"))
    only = next(iter(groups.values())) if len({*groups.values()}) == 1 else None
    rank = rank or 0
    collectives = []
    for entry in dump.get("entries") or ():
        if not isinstance(entry, dict):
            continue
        backend_op = str(entry.get("profiling_name", ""))
        op = backend_op.partition(":")[2] or backend_op
        word, _, rest = op.partition(" ")
        name = _NAMES.get(word, word)
        if name in NOT_COLLECTIVES or not name:
            continue
        pg = entry.get("process_group") or ("", "")
        group, desc = (str(pg[0]), str(pg[1]) if len(pg) > 1 else "") if isinstance(pg, list | tuple) else (str(pg), "")
        ranks = groups.get(group) or only or ()
        lossy = []
        peer = None
        if name in ("send", "recv") and (m := re.findall(r"\d+", rest)):
            peer = int(m[1] if name == "send" else m[0]) if len(m) > 1 else None
        dtypes = entry.get("input_dtypes") or entry.get("output_dtypes") or []
        dtype = dtype_name(str(dtypes[0])) if dtypes else None
        if dtype is None:
            lossy.append("dtype not recorded (float32 assumed)")
        ms = entry.get("duration_ms")
        seq = entry.get("p2p_seq_id") if entry.get("is_p2p") else entry.get("collective_seq_id")
        in_shape, out_shape = entry.get("input_sizes") or [], entry.get("output_sizes") or []
        # Gloo names all_gather_into_tensor "all_gather" too: one gathered tensor is the flat form
        if name == "allgather" and len(out_shape) == 1:
            name = "_allgather_base"
        elif name == "reduce_scatter" and len(in_shape) == 1:
            name = "_reduce_scatter_base"
        collectives.append(
            Collective(
                name=name,
                dtype=dtype or "float32",
                in_elems=numel(in_shape),
                out_elems=numel(out_shape),
                group=group,
                group_ranks=tuple(ranks),
                rank=rank,
                peer=peer,
                recorded_us=float(ms) * 1000 if isinstance(ms, int | float) else None,
                seq=as_int(seq),
                coalesced=len(in_shape) if "coalesced" in name else None,
                group_desc=desc,
                lossy=tuple(lossy),
            )
        )
    world = max((len(r) for r in groups.values()), default=0) or None
    return Trace(
        path=str(path),
        format=FORMAT,
        rank=rank,
        world_size=world,
        backend=str(dump.get("comm_lib_version") or ""),
        digest=hashlib.sha256(data).hexdigest(),
        collectives=tuple(collectives),
        notes=(RING_BUFFER,),
    )
