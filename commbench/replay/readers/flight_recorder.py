"""Flight Recorder dumps (`TORCH_FR_BUFFER_SIZE=N`, dumped on a timeout or by
`torch._C._distributed_c10d._dump_fr_trace()` / `_dump_fr_trace_json()`), pickle or JSON.

A JSON dump is streamed as the other JSON traces are (its "entries" an element at a time). A pickle
cannot be: it is loaded whole, through the pickle-bytes budget (a dump is small, a ring buffer of
the last N entries), and the fields this reader reads are then counted, each list as often as it is
reached, against the elements budget, before anything walks them (limits.py). Each entry gives the
op (`profiling_name`, "nccl:all_reduce", "gloo:broadcast", "nccl:send 0->1"), its tensors' sizes and
dtypes, its process group and `collective_seq_id`; `duration_ms` where timing was on; in a pickle,
the Python stack it was issued from. It records no root, no all-to-all splits and no iteration: the
iterations are found by their repeating sequence (iterations.py).

ProcessGroupGloo (torch 2.13) records into it too, with gaps this reader says: no send/recv at all
(the op_id counts them), a reduce_scatter_tensor as "gloo:all_reduce" of its whole input (the
stack tells), and a pg_config of one nameless entry that lists no ranks once the job has a second
group (every rank's dumps together tell each group's members: `together`)."""

from __future__ import annotations

import dataclasses
import io
import pickle
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
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
from commbench.replay.readers.iterations import Stack, iterations
from commbench.replay.readers.limits import LIMITS, Limits, Tally
from commbench.replay.readers.stream import JsonStream, TraceBytes, cut_short, head
from commbench.replay.record import Collective, Trace

FORMAT = "flight-recorder"
RING_BUFFER = "a Flight Recorder dump holds the last entries of a ring buffer (TORCH_FR_BUFFER_SIZE), not the whole job"
NO_GROUP_RANKS = (
    "the dump's pg_config lists no group's ranks (Gloo writes one nameless entry, ranks [], once the job makes "
    "a second group): give every rank's dump, whose entries tell each group's members"
)
RECOVERED_RANKS = (
    "the dumps' pg_config lists no group's ranks (Gloo's): each group's members are the ranks whose dumps hold "
    "its entries, which holds as every rank's dump is given"
)
NO_SPLITS = "all_to_all splits not recorded (a Flight Recorder entry holds only this rank's totals)"
# the torch.distributed functions that reduce-scatter: on Gloo, recorded as "gloo:all_reduce" of the whole input
_SCATTERS = ("reduce_scatter_single", "reduce_scatter_tensor", "_reduce_scatter_base")
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
    "op_id",
    "frames",
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


def _stack(frames: Any) -> Stack | None:
    """A pickled entry's Python stack, outermost frame first; None where the dump keeps none (JSON)."""
    if not isinstance(frames, list | tuple) or not frames:
        return None
    return tuple(
        (_text(f.get("filename")), _text(f.get("name")), as_int(f.get("line")))
        for f in reversed(frames)
        if isinstance(f, dict)
    )


def _text(value: Any) -> str:
    """A frame's name or file: text as recorded, "" for anything else (never a container's str())."""
    return value if isinstance(value, str) else ""


def _api(stack: Stack | None) -> str:
    """The torch.distributed function the entry was issued through: its innermost distributed_c10d frame."""
    return next((name for file, name, _ in reversed(stack or ()) if file.endswith("distributed_c10d.py")), "")


@dataclass(frozen=True)
class _Entry:
    """One entry's collective, and what the dump says beside it."""

    collective: Collective
    stack: Stack | None
    gloo: bool  # recorded by ProcessGroupGloo ("gloo:all_reduce")
    ops: int | None  # op_id: the group's ops so far, collectives and point-to-point
    p2p: int  # the group's collectives and point-to-point ops so far that the dump records


def _entry(entry: dict[str, Any], rank: int, durations: Durations) -> _Entry | None:
    """The collective one entry recorded, its group's ranks left empty (see _placed); None for an
    entry that is no collective."""
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
    if dtype is None and name != "barrier":
        lossy.append("dtype not recorded (float32 assumed)")
    if name == "alltoall_base":
        lossy.append(NO_SPLITS)
    seq = entry.get("p2p_seq_id") if entry.get("is_p2p") else entry.get("collective_seq_id")
    in_shape, out_shape = _shape(entry.get("input_sizes")), _shape(entry.get("output_sizes"))
    stack = _stack(entry.get("frames"))
    # Gloo names all_gather_into_tensor "all_gather" too: one gathered tensor is the flat form; it
    # reduce-scatters by all-reducing the whole input, "all_reduce" (only the stack tells)
    if name == "allgather" and len(out_shape) == 1:
        name = "_allgather_base"
    elif (name == "reduce_scatter" and len(in_shape) == 1) or (name == "allreduce" and _api(stack) in _SCATTERS):
        name = "_reduce_scatter_base"
    c = Collective(
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
    recorded = (as_int(entry.get("collective_seq_id")) or 0) + (as_int(entry.get("p2p_seq_id")) or 0)
    return _Entry(c, stack, backend_op.startswith("gloo:"), as_int(entry.get("op_id")), recorded)


def _entries(path: Path, entries: Iterable[Any], rank: int, durations: Durations, limits: Limits) -> list[_Entry]:
    kept = Tally(limits, "collectives", path, "holds more than {} collectives")
    out = []
    for entry in entries:
        if isinstance(entry, dict) and (e := _entry(entry, rank, durations)) is not None:
            kept.add()
            out.append(e)
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


def _placed(c: Collective, ranks: tuple[int, ...]) -> Collective:
    """The collective on its group's ranks; a Gloo reduce-scatter (recorded as the all_reduce of its
    whole input) given its shard, the input over the group's size."""
    out = c.out_elems
    if c.name == "_reduce_scatter_base" and out == c.in_elems and len(ranks) > 1 and not out % len(ranks):
        out //= len(ranks)
    return Collective(**{**c.__dict__, "group_ranks": ranks, "out_elems": out})


def _group_ranks(pg_config: Any, named: set[str]) -> tuple[dict[str, tuple[int, ...]], list[str]]:
    """Each group's ranks as pg_config gives them, and the line saying what it lost. Gloo's is one
    nameless entry: all the ranks while the job has only the default group, "[]" once it makes another."""
    groups = _ranks_by_group(pg_config)
    if set(groups) - {""}:
        return groups, []
    ranks = groups.get("", ())
    if ranks and len(named) == 1:
        return {next(iter(named)): ranks}, []
    return {}, [NO_GROUP_RANKS] if named else []


def _lines(entries: list[_Entry], stacks: bool) -> list[str]:
    """What a Gloo dump lacks, one line each: its point-to-point ops (the op_id counts them, no entry
    records them), and in a JSON dump the stacks that tell its reduce-scatters from its all_reduces."""
    if not any(e.gloo for e in entries):
        return []
    missing: dict[str, int] = {}
    for e in entries:
        if e.ops is not None and e.ops > e.p2p:
            missing[e.collective.group] = e.ops - e.p2p
    lines = []
    if missing:
        where = ", ".join(f"{n} on group {g!r}" for g, n in missing.items())
        lines.append(
            f"Gloo records no send/recv in a Flight Recorder dump: {where} issued before its last entry (op_id past "
            "collective_seq_id) are not in it, nor replayed"
        )
    scatters = sum(e.collective.name == "_reduce_scatter_base" for e in entries)
    if stacks and scatters:
        lines.append(
            f"{scatters} gloo:all_reduce entries read as reduce-scatters of their whole input: their stacks run through reduce_scatter_tensor"
        )
    elif not stacks and any(e.collective.name == "allreduce" for e in entries):
        lines.append(
            "Gloo records a reduce_scatter_tensor as gloo:all_reduce of its whole input and a JSON dump keeps no stacks: "
            "a reduce-scatter among its all_reduces is replayed as one (a pickled dump, _dump_fr_trace(), tells them apart)"
        )
    return lines


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
    """Every entry of one dump that is a collective, in the order the ring buffer holds them, placed
    in the iterations found (iterations.py); what the dump lacks said in its notes."""
    rank = rank or 0
    durations = Durations()
    if head(path, 1) == b"\x80":
        dump, digest = _load_pickle(path, limits)
        entries = dump.get("entries")
        _check_entries(path, "entries" in dump, entries, len(entries) if isinstance(entries, list | tuple) else 0)
        _check_expansion(path, dump, limits)
        found = _entries(path, dump["entries"], rank, durations, limits)
    else:
        with JsonStream(path, limits, keep=("pg_config", "comm_lib_version", "entries")) as stream:
            found = _entries(path, stream.items("entries"), rank, durations, limits)
            digest = stream.digest()
        dump = stream.meta
        _check_entries(path, stream.found or "entries" in dump, dump.get("entries"), stream.count)
    stacks = [e.stack for e in found]
    known = stacks if found and all(stacks) else None
    cut = iterations([e.collective for e in found], known)  # type: ignore[arg-type]
    groups, lost = _group_ranks(dump.get("pg_config"), {e.collective.group for e in found})
    only = next(iter(groups.values())) if len({*groups.values()}) == 1 else None
    placed = [
        _placed(Collective(**{**e.collective.__dict__, "step": step}), groups.get(e.collective.group) or only or ())
        for e, step in zip(found, cut.steps)
    ]
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
        steps=tuple(range(1, cut.count + 1)),
        notes=(RING_BUFFER, cut.line, *lost, *_lines(found, known is not None), *durations.note()),
    )


def together(traces: list[Trace]) -> list[Trace]:
    """Every rank's dumps of one job, each group's ranks recovered where pg_config lost them (Gloo's):
    a group's members are the ranks whose dumps hold its entries (a group's name is the same on
    every member, its pg_id is not). Refused in one line where a group's all_gathers gather from more
    ranks than the dumps given hold it: a rank's dump is missing."""
    if len(traces) < 2 or not any(NO_GROUP_RANKS in t.notes for t in traces):
        return traces
    holders: dict[str, set[int]] = {}
    for t in traces:
        for c in t.collectives:
            holders.setdefault(c.group, set()).add(t.rank)
    members = {g: tuple(sorted(ranks)) for g, ranks in holders.items()}
    for t in traces:
        for c in t.collectives:
            gathers = c.name == "_allgather_base" and c.in_elems and c.out_elems // c.in_elems > len(members[c.group])
            if gathers:
                raise UserError(
                    f"{t.path}: group {c.group!r} gathers from {c.out_elems // c.in_elems} ranks, but only the dumps of "
                    f"rank {', '.join(map(str, members[c.group]))} hold it; give every rank's Flight Recorder dump"
                )
    default = next((c.group for t in traces for c in t.collectives if c.group_desc == "default_pg"), "0")
    world = len(members.get(default, ())) or max(t.rank for t in traces) + 1
    return [
        dataclasses.replace(
            t,
            world_size=t.world_size or world,
            collectives=tuple(c if c.group_ranks else _placed(c, members[c.group]) for c in t.collectives),
            notes=tuple(RECOVERED_RANKS if n == NO_GROUP_RANKS else n for n in t.notes),
        )
        for t in traces
    ]


def _recognises(head: bytes) -> bool:
    """A pickle (torch's default dump), or a JSON dump (its entries, its groups, its library)."""
    if head.startswith(b"\x80"):
        return True
    return head.startswith(b"{") and any(k in head for k in (b'"entries"', b'"pg_config"', b'"comm_lib_version"'))


READER = Reader(FORMAT, _recognises, read, together)
