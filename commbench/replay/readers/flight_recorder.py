"""Flight Recorder dumps (`TORCH_FR_BUFFER_SIZE=N`, dumped on a timeout or by
`torch._C._distributed_c10d._dump_fr_trace()` / `_dump_fr_trace_json()`), pickle or JSON.

A JSON dump is streamed as the other JSON traces are (its "entries" an element at a time). A pickle
cannot be: it is loaded whole, through the pickle-bytes budget (a dump is small, a ring buffer of
the last N entries), and the fields this reader reads are then counted, each list as often as it is
reached, against the elements budget, before anything walks them (limits.py). Each entry gives the
op (`profiling_name`, "nccl:all_reduce", "gloo:broadcast", "nccl:send 0->1"), its tensors' sizes and
dtypes, its process group and `collective_seq_id`; `duration_ms` where timing was on. It records no
root, no all-to-all splits and no profiler step."""

from __future__ import annotations

import io
import pickle
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from commbench.errors import UserError
from commbench.replay.readers.comms import NOT_COLLECTIVES
from commbench.replay.readers.fields import (
    Damaged,
    Durations,
    as_int,
    dtype_name,
    elements,
    numel,
    rank_list,
    shown,
)
from commbench.replay.readers.format import Reader
from commbench.replay.readers.limits import LIMITS, Limits, Tally
from commbench.replay.readers.stream import JsonStream, TraceBytes, cut_short, head
from commbench.replay.record import Collective, Trace

FORMAT = "flight-recorder"
RING_BUFFER = "a Flight Recorder dump holds the last entries of a ring buffer (TORCH_FR_BUFFER_SIZE), not the whole job"
NOT_A_DUMP = "give a profiler trace, an Execution Trace or a Flight Recorder dump"

# profiling_name's op (after "nccl:"/"gloo:") in record_param_comms' words
_NAMES = {
    "all_reduce": "allreduce",
    "all_reduce_coalesced": "allreduce_coalesced",
    "all_gather": "allgather",
    "all_to_all": "alltoall_base",
    "reduce_scatter": "reduce_scatter",
}
# the fields of an entry this reader reads: the only ones a pickled dump's budget walks
_READ = (
    "profiling_name",
    "process_group",
    "input_dtypes",
    "output_dtypes",
    "input_sizes",
    "output_sizes",
    "duration_ms",
    "collective_seq_id",
    "p2p_seq_id",
    "is_p2p",
)


class _PlainData(pickle.Unpickler):
    """A dump holds dicts, lists, tuples, strings and numbers only: a pickle that names any class
    (which would run its code on load) is no dump and is refused, never loaded."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"it names {module}.{name}, which no Flight Recorder dump holds")


def _load_pickle(path: Path, limits: Limits) -> tuple[dict[str, Any], str]:
    """The pickled dump's dict and the file's digest, its content read whole but never past the
    pickle-bytes budget (a pickle streamed through Python reads costs 16 times as long, protocol 2)."""
    with TraceBytes(path, limits, "pickle_bytes") as f:
        data = f.read_all()
        digest = f.digest()
    try:
        dump = _PlainData(io.BytesIO(data)).load()
    except (MemoryError, RecursionError):
        raise
    except pickle.UnpicklingError as exc:
        if "Flight Recorder" in str(exc):
            raise UserError(f"{path}: not a trace ({exc}); {NOT_A_DUMP}") from None
        raise cut_short(path, exc) from None
    except Exception as exc:  # a damaged pickle raises whatever the opcode it broke raises
        raise cut_short(path, exc) from None
    del data
    if not isinstance(dump, dict):
        raise UserError(f"{path}: not a trace (a pickle of {shown(dump)}, no Flight Recorder dump); {NOT_A_DUMP}")
    return dump, digest


def _pickled_fields(dump: dict[str, Any]) -> Iterator[Any]:
    pg_config = dump.get("pg_config")
    if isinstance(pg_config, dict):
        yield from (cfg.get("ranks") for cfg in pg_config.values() if isinstance(cfg, dict))
    entries = dump.get("entries")
    for entry in entries if isinstance(entries, list | tuple) else ():
        if isinstance(entry, dict):
            yield from (entry.get(name) for name in _READ)


def _check_expansion(path: Path, dump: dict[str, Any], limits: Limits) -> None:
    """Refuse a pickled dump whose read fields hold more list elements than the elements budget,
    a list shared n times counted n times (a 770-byte pickle can share its lists into 2^60 leaves),
    before anything else walks them; and one of more entries than the events budget."""
    entries = dump.get("entries")
    if isinstance(entries, list | tuple) and len(entries) > limits.events:
        raise limits.over(path, "events", "holds more than {} entries")
    if elements(_pickled_fields(dump), "an entry's field", limits.elements) > limits.elements:
        raise limits.over(path, "elements", "its entries' fields expand to more than {} list elements")


def _name(value: Any, field: str) -> str:
    if isinstance(value, str | int) and not isinstance(value, bool):
        return str(value)
    raise Damaged(f"{field} is {shown(value)}, not a name")


def _shape(value: Any) -> list[Any]:
    return value if isinstance(value, list | tuple) else []


def _entry(entry: dict[str, Any], rank: int, durations: Durations) -> Collective | None:
    """The collective one entry recorded, its group's ranks left empty (see _with_ranks); None for
    an entry that is no collective."""
    backend_op = entry.get("profiling_name", "")
    if not isinstance(backend_op, str):
        raise Damaged(f"an entry's profiling_name is {shown(backend_op)}, not an op's name")
    op = backend_op.partition(":")[2] or backend_op
    word, _, rest = op.partition(" ")
    name = _NAMES.get(word, word)
    if name in NOT_COLLECTIVES or not name:
        return None
    pg = entry.get("process_group") or ("", "")
    if isinstance(pg, list | tuple):
        group = _name(pg[0], f"{backend_op}'s process_group") if pg else ""
        desc = _name(pg[1], f"{backend_op}'s process_group") if len(pg) > 1 else ""
    else:
        group, desc = _name(pg, f"{backend_op}'s process_group"), ""
    lossy = []
    peer = None
    if name in ("send", "recv") and len(m := re.findall(r"\d+", rest)) > 1:
        peer = as_int(m[1] if name == "send" else m[0])
    dtypes = _shape(entry.get("input_dtypes")) or _shape(entry.get("output_dtypes"))
    dtype = dtype_name(dtypes[0]) if dtypes and isinstance(dtypes[0], str) else None
    if dtype is None:
        lossy.append("dtype not recorded (float32 assumed)")
    seq = entry.get("p2p_seq_id") if entry.get("is_p2p") else entry.get("collective_seq_id")
    in_shape, out_shape = _shape(entry.get("input_sizes")), _shape(entry.get("output_sizes"))
    # Gloo names all_gather_into_tensor "all_gather" too: one gathered tensor is the flat form
    if name == "allgather" and len(out_shape) == 1:
        name = "_allgather_base"
    elif name == "reduce_scatter" and len(in_shape) == 1:
        name = "_reduce_scatter_base"
    return Collective(
        name=name,
        dtype=dtype or "float32",
        in_elems=numel(in_shape, f"{backend_op}'s input_sizes"),
        out_elems=numel(out_shape, f"{backend_op}'s output_sizes"),
        group=group,
        group_ranks=(),
        rank=rank,
        peer=peer,
        recorded_us=durations.us(entry.get("duration_ms"), f"{backend_op}'s duration_ms", scale=1000.0),
        seq=as_int(seq),
        coalesced=len(in_shape) if "coalesced" in name else None,
        group_desc=desc,
        lossy=tuple(lossy),
    )


def _collectives(
    path: Path, entries: Iterable[Any], rank: int, durations: Durations, limits: Limits
) -> list[Collective]:
    kept = Tally(limits, "collectives", path, "holds more than {} collectives")
    out = []
    for entry in entries:
        if isinstance(entry, dict) and (c := _entry(entry, rank, durations)) is not None:
            kept.add()
            out.append(c)
    return out


def _ranks_by_group(pg_config: Any) -> dict[str, tuple[int, ...]]:
    if pg_config is None:
        return {}
    if not isinstance(pg_config, dict):
        raise Damaged(f"pg_config is {shown(pg_config)}, not an object of process groups")
    out: dict[str, tuple[int, ...]] = {}
    for key, cfg in pg_config.items():
        if isinstance(cfg, dict):
            ranks = rank_list(cfg.get("ranks"), f"pg_config {shown(key)}'s ranks")[0]
            out[str(key)] = ranks
            out[_name(cfg.get("name", key), f"pg_config {shown(key)}'s name")] = ranks
    return out


def _check_entries(path: Path, present: bool, entries: Any, count: int) -> None:
    """Refuse a dump without entries, whose entries are no list, or an empty one."""
    if not present:
        raise UserError(f"{path}: not a trace (no Flight Recorder entries); {NOT_A_DUMP}")
    if entries is not None and not isinstance(entries, list | tuple):
        raise Damaged(f"entries is {shown(entries)}, not a list of entries")
    if not count:
        raise UserError(
            f"{path}: an empty trace (a Flight Recorder dump with no entries); dump it after the job issued collectives"
        )


def read(path: Path, rank: int | None = None, limits: Limits = LIMITS) -> Trace:
    """Every entry of one dump that is a collective, in the order the ring buffer holds them."""
    rank = rank or 0
    durations = Durations()
    if head(path, 1) == b"\x80":
        dump, digest = _load_pickle(path, limits)
        entries = dump.get("entries")
        _check_entries(path, "entries" in dump, entries, len(entries) if isinstance(entries, list | tuple) else 0)
        _check_expansion(path, dump, limits)
        collectives = _collectives(path, dump["entries"], rank, durations, limits)
    else:
        with JsonStream(path, limits, keep=("pg_config", "comm_lib_version", "entries")) as stream:
            collectives = _collectives(path, stream.items("entries"), rank, durations, limits)
            digest = stream.digest()
        dump = stream.meta
        _check_entries(path, stream.found or "entries" in dump, dump.get("entries"), stream.count)
    groups = _ranks_by_group(dump.get("pg_config"))
    only = next(iter(groups.values())) if len({*groups.values()}) == 1 else None
    placed = [Collective(**{**c.__dict__, "group_ranks": groups.get(c.group) or only or ()}) for c in collectives]
    world = max((len(r) for r in groups.values()), default=0) or None
    backend = dump.get("comm_lib_version")
    return Trace(
        path=str(path),
        format=FORMAT,
        rank=rank,
        world_size=world,
        backend=backend if isinstance(backend, str) else "",
        digest=digest,
        collectives=tuple(placed),
        notes=(RING_BUFFER, *durations.note()),
    )


def _recognises(head: bytes) -> bool:
    """A pickle (torch's default dump), or a JSON dump (its entries, its groups, its library)."""
    if head.startswith(b"\x80"):
        return True
    return head.startswith(b"{") and any(k in head for k in (b'"entries"', b'"pg_config"', b'"comm_lib_version"'))


READER = Reader(FORMAT, _recognises, read)
