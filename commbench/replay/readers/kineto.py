"""Kineto / Chrome traces (`torch.profiler` ... `export_chrome_trace`, `.json` or `.json.gz`).

The events are streamed; kept are only the collectives' CPU ops (`record_param_comms`, else the
dispatcher ops `c10d::*` a backend without it leaves), the GPU kernels they launched (their `dur` is
the recorded time and its span, linked by "External id", else through the launch's "correlation" or its
ac2g flow events to the record_param_comms span that launched it), the `gloo:*` annotations (dtype, time
and span on Gloo, each paired with the dispatcher op it ran: _Annotations) and the `ProfilerStep#N`
spans. Everything else in the trace is read and dropped."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commbench.errors import UserError
from commbench.replay.readers.comms import (
    KINETO,
    comms_collective,
    comms_ops,
    dispatcher_collective,
    dispatcher_note,
)
from commbench.replay.readers.fields import (
    DISPATCHER_OPS,
    Damaged,
    Durations,
    arg,
    as_int,
    dtype_name,
    key,
    rank_count,
    rank_list,
    rank_number,
    shown,
    tensor_shapes,
    time_point,
)
from commbench.replay.readers.format import Reader
from commbench.replay.readers.limits import LIMITS, Limits, Tally
from commbench.replay.readers.stream import JsonStream
from commbench.replay.record import Collective, Trace

FORMAT = "kineto"


@dataclass
class _Op:
    name: str
    ts: float
    dur: float | None  # None where not recorded, or dropped as impossible (fields.Durations)
    tid: Any
    args: dict[str, Any]
    pid: Any = None


def _args(event: dict[str, Any], name: str) -> dict[str, Any]:
    args = event.get("args")
    if args is None:
        return {}
    if not isinstance(args, dict):
        raise Damaged(f"a {name!r} event's args is {shown(args)}, not an object")
    return args


def _slim(event: dict[str, Any], name: str, durations: Durations) -> _Op:
    return _Op(
        name,
        time_point(event.get("ts"), f"a {name!r} event's ts"),
        durations.us(event.get("dur"), f"a {name!r} event's dur"),
        key(event.get("tid")),
        _args(event, name),
        key(event.get("pid")),
    )


def _where(event: dict[str, Any]) -> tuple[Any, Any, float]:
    """(pid, tid, ts): where an ac2g flow's end binds to an event."""
    return (
        key(event.get("pid")),
        key(event.get("tid")),
        time_point(event.get("ts"), f"a {event.get('ph')!r} event's ts"),
    )


@dataclass(frozen=True)
class _Orphan:
    """A collective's GPU kernel written without "External id" (some Kineto versions and exporters):
    linked to its CPU op through the launch instead (see _link_orphans)."""

    where: tuple[Any, Any, float]  # (pid, tid, ts): where an ac2g flow's end binds to it (ts: its start)
    correlation: Any  # its "correlation" (the launch's), None where not written
    dur: float


@dataclass
class _Ran:
    """What a collective's kernels took: their durations added (the recorded time), and the span from
    the first one's start to the last one's end (where it ran: replay/spans.py merges a step's)."""

    us: float
    start: float
    end: float

    def add(self, ts: float, dur: float) -> None:
        self.us += dur
        self.start, self.end = min(self.start, ts), max(self.end, ts + dur)

    @property
    def span(self) -> tuple[float, float]:
        return (self.start, self.end)


def _ran(times: dict[Any, _Ran], ext: Any, ts: float, dur: float) -> None:
    if ext in times:
        times[ext].add(ts, dur)
    else:
        times[ext] = _Ran(dur, ts, ts + dur)


def _is_comm_kernel(name: str, args: dict[str, Any]) -> bool:
    return "Collective name" in args or name.lower().startswith(("nccl", "rccl"))


@dataclass
class _Kept:
    """What the first pass keeps of a trace: a few records per collective, held to the budget."""

    tally: Tally
    durations: Durations
    comms: list[_Op] = field(default_factory=list)
    dispatched: list[_Op] = field(default_factory=list)
    steps: list[tuple[float, float, int]] = field(default_factory=list)
    kernels: dict[Any, _Ran] = field(default_factory=dict)  # by "External id"
    annotations: list[tuple[int, _Op]] = field(default_factory=list)  # gloo:* and its "Record function id"
    orphans: list[_Orphan] = field(default_factory=list)

    def event(self, event: dict[str, Any]) -> None:
        """Keep what one complete ("X") event holds for the replay, if anything."""
        name = event.get("name")
        name = name if isinstance(name, str) else ""
        if name == "record_param_comms":
            self.comms.append(_slim(event, name, self.durations))
        elif name in DISPATCHER_OPS:
            self.dispatched.append(_slim(event, name, self.durations))
        elif name.startswith("ProfilerStep#") and (n := as_int(name.partition("#")[2] or 0)) is not None:
            op = _slim(event, name, self.durations)
            if op.dur is None:
                return
            self.steps.append((op.ts, op.ts + op.dur, n))
        elif event.get("cat") == "kernel" and _is_comm_kernel(name, args := _args(event, name)):
            dur = self.durations.us(event.get("dur"), f"kernel {name!r}'s dur")
            if dur is None:
                return
            if (ext := key(args.get("External id"))) is not None:
                _ran(self.kernels, ext, time_point(event.get("ts"), f"kernel {name!r}'s ts"), dur)
            else:
                self.orphans.append(_Orphan(_where(event), key(args.get("correlation")), dur))
        elif name.startswith("gloo:") and (rf := as_int(_args(event, name).get("Record function id"))) is not None:
            self.annotations.append((rf, _slim(event, name, self.durations)))
        else:
            return
        self.tally.add()


def _groups(info: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """distributedInfo's process groups: their ranks by name."""
    pg_config = info.get("pg_config")
    if pg_config is None:
        return {}
    if not isinstance(pg_config, list):
        raise Damaged(f"distributedInfo.pg_config is {shown(pg_config)}, not a list of groups")
    return {
        str(g.get("pg_name")): rank_list(
            g.get("ranks"), f"distributedInfo.pg_config {shown(g.get('pg_name'))}'s ranks"
        )[0]
        for g in pg_config
        if isinstance(g, dict)
    }


def read(path: Path, rank: int | None = None, limits: Limits = LIMITS) -> Trace:
    """Every collective of one Kineto trace, in the order the job issued them."""
    kept = _Kept(Tally(limits, "collectives", path, "holds more than {} collectives, kernels and steps"), Durations())
    with JsonStream(path, limits, keep=("distributedInfo", "traceEvents")) as stream:
        for event in stream.items("traceEvents"):
            if isinstance(event, dict) and event.get("ph") == "X":
                kept.event(event)
        digest = stream.digest()
    if "traceEvents" in stream.meta:  # kept only where it is no array
        raise Damaged(f"traceEvents is {shown(stream.meta['traceEvents'])}, not a list of events")
    if not stream.count:
        raise UserError(
            f"{path}: an empty trace (no events); profile at least one step of the job (torch.profiler's schedule with active=1 or more)"
        )
    info = stream.meta.get("distributedInfo") or {}
    if not isinstance(info, dict):
        raise Damaged(f"distributedInfo is {shown(info)}, not an object")
    world = rank_count(info.get("world_size"), "distributedInfo.world_size")
    # distributedInfo's rank, else the one the file's name gives (a trace written without it)
    recorded = rank_number(info.get("rank"), "distributedInfo.rank", world)
    rank = recorded if recorded is not None else rank or 0
    groups = _groups(info)
    backend = " ".join(str(v) for v in (info.get("backend"), info.get("nccl_version")) if v)
    kept.steps.sort()
    notes: list[str] = []
    if kept.comms and kept.orphans:
        _link_orphans(path, limits, kept)
    if kept.comms:
        collectives = _from_record_param_comms(path, kept.comms, kept.kernels, groups, rank, notes)
    else:
        collectives = _from_dispatcher_ops(kept.dispatched, kept.annotations, groups, rank, world, notes)
    collectives.sort(key=lambda pair: pair[0])
    placed = tuple(_with_step(c, ts, kept.steps) for ts, c in collectives)
    return Trace(
        path=str(path),
        format=FORMAT,
        rank=rank,
        world_size=world,
        backend=backend,
        digest=digest,
        collectives=placed,
        steps=tuple(n for _, _, n in kept.steps),
        notes=(*notes, *kept.durations.note()),
    )


_RUNTIME = ("cuda_runtime", "cuda_driver", "runtime")


def _link_orphans(path: Path, limits: Limits, kept: _Kept) -> None:
    """Add the orphan kernels' times to kernels under the "External id" of the record_param_comms
    whose span holds their launch. A second pass over the trace, made only when such kernels exist:
    it keeps only the launches (runtime events, ac2g flow starts) inside a collective's span and the
    flow ends on the orphans, so memory stays bounded by the collectives, not by the trace."""
    comms, orphans, kernels = kept.comms, kept.orphans, kept.kernels
    by_thread: dict[tuple[Any, Any], list[tuple[float, float, int]]] = {}
    for i, op in enumerate(comms):
        by_thread.setdefault((op.pid, op.tid), []).append((op.ts, op.ts + (op.dur or 0.0), i))
    spans = {thread: _Spans(group) for thread, group in by_thread.items()}
    at = {o.where for o in orphans if o.correlation is None}
    launched: dict[Any, int] = {}  # correlation -> index in comms of the op that launched it
    flow_ends: dict[tuple[Any, Any, float], Any] = {}  # an orphan's (pid, tid, ts) -> its flow's id
    with JsonStream(path, limits, keep=()) as stream:
        for event in stream.items("traceEvents"):
            if not isinstance(event, dict):
                continue
            ph, cat, args = event.get("ph"), event.get("cat"), event.get("args")
            if ph == "f" and cat == "ac2g":
                if (where := _where(event)) in at:
                    flow_ends[where] = key(event.get("id"))
                continue
            if ph == "s" and cat == "ac2g":
                correlation = key(event.get("id"))
            elif ph == "X" and cat in _RUNTIME and isinstance(args, dict) and "correlation" in args:
                correlation = key(args["correlation"])
            else:
                continue
            where = _where(event)
            if (thread := spans.get(where[:2])) is not None and (i := thread.holding(where[2])) is not None:
                launched[correlation] = i
    for o in orphans:
        correlation = o.correlation if o.correlation is not None else flow_ends.get(o.where)
        if (i := launched.get(correlation)) is not None:
            ext = key(comms[i].args.setdefault("External id", ("launched", i)))
            _ran(kernels, ext, o.where[2], o.dur)


class _Spans:
    """One thread's record_param_comms spans, sorted by start: which holds a time, in O(log n) for
    the disjoint spans collectives mostly are (the running maximum of the ends stops the search)."""

    def __init__(self, spans: list[tuple[float, float, int]]) -> None:
        self.spans = sorted(spans)
        self.reach: list[float] = []  # the latest end among spans[: i + 1]
        for _, end, _ in self.spans:
            self.reach.append(max(end, self.reach[-1]) if self.reach else end)

    def holding(self, ts: float) -> int | None:
        """The innermost span (the latest to start) that holds ts, as its index in comms."""
        j = bisect.bisect_right(self.spans, (ts, float("inf"), 0)) - 1
        while j >= 0 and self.reach[j] >= ts:
            start, end, i = self.spans[j]
            if start <= ts <= end:
                return i
            j -= 1
        return None


def _with_step(c: Collective, ts: float, steps: list[tuple[float, float, int]]) -> Collective:
    i = bisect.bisect_right(steps, (ts, float("inf"), 0)) - 1
    if i >= 0 and steps[i][0] <= ts < steps[i][1]:
        return Collective(**{**c.__dict__, "step": steps[i][2]})
    return c


def _from_record_param_comms(
    path: Path,
    ops: list[_Op],
    kernels: dict[Any, _Ran],
    groups: dict[str, tuple[int, ...]],
    rank: int,
    notes: list[str],
) -> list[tuple[float, Collective]]:
    out: list[tuple[float, Collective]] = []
    markers: list[tuple[float, str, _Ran | None]] = []  # each coalescing block's end: ts, group, its kernel's times
    for ts, a, name in comms_ops(path, ((op.ts, op.args) for op in ops), KINETO, notes, skip=("wait",)):
        ran = kernels.get(key(a.get("External id")))
        if name == "coalesced":
            markers.append((ts, str(a.get(KINETO.group, "")), ran))
            continue
        extra = {
            "recorded_us": None if ran is None else ran.us,
            "recorded_span_us": None if ran is None else ran.span,
            "seq": as_int(a.get("Seq")),
            "comms_id": None if a.get("Comms Id") is None else str(a.get("Comms Id")),
        }
        out.append((ts, comms_collective(a, KINETO, name, rank, groups, **extra)))
    return _coalesce(out, markers, notes) if markers else out


# A coalescing block's members, by their recorded name -> the grouped form's name (the ops' Recorded names)
COALESCED_FORMS = {
    "_allgather_base": "allgather_into_tensor_coalesced",
    "allgather_into_tensor": "allgather_into_tensor_coalesced",
    "all_gather_into_tensor": "allgather_into_tensor_coalesced",
    "allreduce": "allreduce_coalesced",
    "_reduce_scatter_base": "reduce_scatter_tensor_coalesced",
    "reduce_scatter_tensor": "reduce_scatter_tensor_coalesced",
}


def _coalesce(
    out: list[tuple[float, Collective]], markers: list[tuple[float, str, _Ran | None]], notes: list[str]
) -> list[tuple[float, Collective]]:
    """Each NCCL coalescing block as the one grouped collective it launched. NCCL writes the block's
    members (each with its sizes) and then a "coalesced" entry, which launches the block's one kernel:
    the members are the collectives of the marker's group issued since the previous block or the
    previous collective with a kernel of its own, themselves without one. They become one collective
    of the grouped form (its tensors, their total elements, the marker kernel's time); a block whose
    members are not all one op and dtype (a batch of sends and recvs) stays as its members."""
    out = sorted(out, key=lambda pair: pair[0])
    times = [ts for ts, _ in out]
    merged: dict[int, tuple[float, Collective]] = {}  # index of a block's first member -> the block
    dropped: set[int] = set()
    kept_apart = 0
    for ts, group, kernel in sorted(markers, key=lambda m: m[:2]):
        if kernel is None:  # no kernel linked to the marker: the block's start cannot be told
            kept_apart += 1
            continue
        members: list[int] = []
        for i in range(bisect.bisect_left(times, ts) - 1, -1, -1):
            c = out[i][1]
            if c.group != group:
                continue
            if c.recorded_us is not None or i in dropped or i in merged:
                break
            members.insert(0, i)
        cs = [out[i][1] for i in members]
        if not cs or len({(c.name, c.dtype) for c in cs}) > 1 or cs[0].name not in COALESCED_FORMS:
            kept_apart += 1
            continue
        first = cs[0]
        block = Collective(
            **{
                **first.__dict__,
                "name": COALESCED_FORMS[first.name],
                "in_elems": sum(c.in_elems for c in cs),
                "out_elems": sum(c.out_elems for c in cs),
                "recorded_us": kernel.us,
                "recorded_span_us": kernel.span,
                "coalesced": len(cs),
                "lossy": tuple(dict.fromkeys(x for c in cs for x in c.lossy)),
            }
        )
        merged[members[0]] = (out[members[0]][0], block)
        dropped.update(members[1:])
    if merged:
        notes.append(f"{len(merged)} NCCL coalescing block(s) read as one grouped collective each")
    if kept_apart:
        notes.append(f"{kept_apart} NCCL coalescing block(s) replayed as their members, one by one")
    return [merged.get(i, pair) for i, pair in enumerate(out) if i not in dropped]


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


class _Annotations:
    """The backend's own annotations (gloo:all_reduce...), each one claimed by one dispatcher op: the
    first one not yet claimed, of the name the op's backend gives it, after the op's record-function
    id, that moves the op's input tensors. Not a fixed distance: Gloo runs `_allgather_base_`'s
    chunk/split/narrow ops first (its annotation comes 3 + 3 x the group's size ids later), all-reduces a
    clone for `_reduce_scatter_base_` (4 later, and named gloo:all_reduce), and a run-loop thread's
    own ops take ids from the same counter."""

    LOOK = 64  # annotations of one name looked at past an op's id: the few that run ahead of it

    def __init__(self, found: list[tuple[int, _Op]]) -> None:
        self.by_name: dict[str, list[tuple[int, _Op]]] = {}
        for rf, op in sorted(found, key=lambda pair: pair[0]):
            self.by_name.setdefault(op.name, []).append((rf, op))
        self.ids = {name: [rf for rf, _ in ops] for name, ops in self.by_name.items()}
        self.claimed: set[tuple[str, int]] = set()

    def claim(self, name: str, rf: int | None, moved: tuple[tuple[int, ...], ...] | None) -> _Op | None:
        """The annotation of `name` that ran the op of record-function id rf, moving the tensors of
        these shapes (None where the op's shapes are not recorded: the first one of the name)."""
        ops = self.by_name.get(name)
        if rf is None or not ops:
            return None
        first = bisect.bisect_right(self.ids[name], rf)
        for j in range(first, min(len(ops), first + self.LOOK)):
            op = ops[j][1]
            if (name, j) in self.claimed or (moved is not None and _moved(op.args.get("Input Dims")) != moved):
                continue
            self.claimed.add((name, j))
            return op
        return None


def _moved(dims: Any) -> tuple[tuple[int, ...], ...] | None:
    """The tensors' shapes a recorded argument holds, None where it holds none (record_shapes off)."""
    shapes = tensor_shapes(dims, "a dispatcher op's Input Dims")
    return shapes or None


def _from_dispatcher_ops(
    ops: list[_Op],
    found: list[tuple[int, _Op]],
    groups: dict[str, tuple[int, ...]],
    rank: int,
    world: int | None,
    notes: list[str],
) -> list[tuple[float, Collective]]:
    if not ops:
        return []
    default = next(iter(groups), "0")
    ranks = groups.get(default) or tuple(range(world or 0))
    notes.append(dispatcher_note("their sizes from Input Dims"))
    annotations = _Annotations(found)
    out: list[tuple[float, Collective]] = []
    for op in sorted(ops, key=lambda op: as_int(op.args.get("Record function id")) or 0):
        spec = DISPATCHER_OPS[op.name]
        dims = _listed(op.args.get("Input Dims"))
        lost = () if dims else ("sizes not recorded (profile with record_shapes=True)",)
        moved = _moved(arg(dims, spec.inp)) if spec.inp is not None else None
        child = annotations.claim(spec.annotation, as_int(op.args.get("Record function id")), moved)
        types = (_listed(child.args.get("Input type")) if child else []) or _listed(op.args.get("Input type"))
        dtype = next((d for t in types if (d := dtype_name(str(t)))), None)
        values = _listed(op.args.get("Concrete Inputs"))
        c = dispatcher_collective(spec, dims, values, dtype, default, ranks, rank, lost)
        if child is not None and child.dur is not None:
            ran = {"recorded_us": child.dur, "recorded_span_us": (child.ts, child.ts + child.dur)}
            c = Collective(**{**c.__dict__, **ran})
        out.append((op.ts, c))
    return out


def _recognises(head: bytes) -> bool:
    return head.startswith(b"{") and any(
        k in head for k in (b'"traceEvents"', b'"schemaVersion"', b'"deviceProperties"')
    )


READER = Reader(FORMAT, _recognises, read)
