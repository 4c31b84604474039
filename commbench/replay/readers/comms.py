"""The collective a JSON trace's CPU op stands for, built one way for both JSON formats (Kineto and
Execution Trace): from a `record_param_comms` op's fields, which the two formats spell differently
(CommsFields), or from a c10d dispatcher op's inputs where a backend wrote no record_param_comms.
Each reader keeps what is its format's own: where the fields sit, the order, the time recorded."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from commbench.errors import UserError
from commbench.replay.readers.fields import (
    NO_PROCESS_GROUP,
    DispatcherOp,
    arg,
    as_int,
    count,
    count_tensors,
    dtype_name,
    int_list,
    numel,
    rank_count,
    rank_list,
    strided_ranks,
)
from commbench.replay.record import Collective

K = TypeVar("K")  # what orders an op in its trace: Kineto's ts, an Execution Trace's rf_id

NOT_COLLECTIVES = ("wait", "coalesced")  # an async handle's wait; the marker ending a coalescing block

NO_SIZES = (
    "{path}: its record_param_comms ops carry no sizes (a trace from a PyTorch older than 2.1), so there is "
    "nothing to replay; record the job again with PyTorch 2.1 or later (`torch.profiler.profile(...)` then "
    "`export_chrome_trace`, or `torch.profiler.ExecutionTraceObserver`), which write each collective's "
    '"In msg nelems", "dtype" and process group'
)


@dataclass(frozen=True)
class CommsFields:
    """What one format calls record_param_comms' fields (PyTorch's RECORD_PARAM_COMMS writes the same ones to both)."""

    name: str
    in_elems: str
    out_elems: str
    in_splits: str
    out_splits: str
    group: str
    group_desc: str
    group_size: str
    rank_start: str
    rank_stride: str
    dst: str
    src: str
    group_ranks: str | None = None  # the group's rank list, where the format writes one


KINETO = CommsFields(
    name="Collective name",
    in_elems="In msg nelems",
    out_elems="Out msg nelems",
    in_splits="In split size",
    out_splits="Out split size",
    group="Process Group Name",
    group_desc="Process Group Description",
    group_size="Group size",
    rank_start="Global rank start",
    rank_stride="Global rank stride",
    dst="Dst Rank",
    src="Src Rank",
    group_ranks="Process Group Ranks",
)

EXECUTION_TRACE = CommsFields(
    name="collective_name",
    in_elems="in_msg_nelems",
    out_elems="out_msg_nelems",
    in_splits="in_split_size",
    out_splits="out_split_size",
    group="pg_name",
    group_desc="pg_desc",
    group_size="pg_size",
    rank_start="global_rank_start",
    rank_stride="global_rank_stride",
    dst="dst_rank",
    src="src_rank",
)


def comms_ops(
    path: Path,
    ops: Iterable[tuple[K, dict[str, Any]]],
    f: CommsFields,
    notes: list[str],
    skip: tuple[str, ...] = NOT_COLLECTIVES,
) -> Iterator[tuple[K, dict[str, Any], str]]:
    """Each record_param_comms op (its order key, fields, lower-case name) but the skipped names,
    which are counted in a note once the last is read. Refused where no op carries sizes."""
    ops = list(ops)
    if not any(f.in_elems in a for _, a in ops):
        raise UserError(NO_SIZES.format(path=path))
    skipped = 0
    for key, a in ops:
        name = str(a.get(f.name, "")).lower()
        if name in skip or not name:
            skipped += 1
            continue
        yield key, a, name
    if skipped:
        notes.append(f"{skipped} wait/coalescing entries skipped (they wait on collectives, they are none)")


def _group_ranks(
    a: dict[str, Any], f: CommsFields, groups: Mapping[str, tuple[int, ...]], lossy: list[str], name: str
) -> tuple[int, ...]:
    ranks, cut = rank_list(a.get(f.group_ranks), f"{name}'s {f.group_ranks!r}") if f.group_ranks else ((), False)
    size = rank_count(a.get(f.group_size), f"{name}'s {f.group_size!r}")
    start, stride = as_int(a.get(f.rank_start)), as_int(a.get(f.rank_stride))
    if cut or not ranks:
        if size and start is not None and stride:
            return strided_ranks(start, stride, size, f"{name}'s {f.rank_start!r} and {f.rank_stride!r}")
        if (known := groups.get(str(a.get(f.group)))) is not None:
            return known
        if cut:
            lossy.append("group ranks cut at 30 entries")
    return ranks


def comms_collective(
    a: dict[str, Any],
    f: CommsFields,
    name: str,
    rank: int,
    groups: Mapping[str, tuple[int, ...]] | None = None,
    **extra: Any,
) -> Collective:
    """The collective one record_param_comms op recorded; groups: the ranks of the groups the trace
    names elsewhere, for a rank list it cut; extra: the Collective's fields only the format has.
    A count, split or rank that no job records is Damaged (fields.py's bounds)."""
    lossy: list[str] = []
    in_splits, in_cut = int_list(a.get(f.in_splits), f"{name}'s {f.in_splits!r}")
    out_splits, out_cut = int_list(a.get(f.out_splits), f"{name}'s {f.out_splits!r}")
    if in_cut or out_cut:
        lossy.append("splits cut at 30 entries")
    dtype = dtype_name(str(a.get("dtype", "")))
    if dtype is None:
        lossy.append(f"dtype {a.get('dtype')!r} unknown (float32 assumed)")
    peer = as_int(a.get(f.dst) if name == "send" else a.get(f.src))
    ranks = _group_ranks(a, f, groups or {}, lossy, name)
    return Collective(
        name=name,
        dtype=dtype or "float32",
        in_elems=count(a.get(f.in_elems), f"{name}'s {f.in_elems!r}") or 0,
        out_elems=count(a.get(f.out_elems), f"{name}'s {f.out_elems!r}") or 0,
        group=str(a.get(f.group, "")),
        group_ranks=ranks,
        rank=rank,
        in_splits=in_splits,
        out_splits=out_splits,
        peer=peer if peer is not None and peer >= 0 else None,
        group_desc=str(a.get(f.group_desc, "")),
        lossy=tuple(lossy),
        **extra,
    )


def dispatcher_note(sizes_from: str) -> str:
    return (
        "no record_param_comms in this trace (a backend that writes none, such as Gloo): collectives read "
        f"from the dispatcher ops c10d::*, {sizes_from}"
    )


def dispatcher_collective(
    spec: DispatcherOp,
    shapes: Any,
    values: Any,
    dtype: str | None,
    group: str,
    ranks: tuple[int, ...],
    rank: int,
    lost: tuple[str, ...] = (),
) -> Collective:
    """The collective one c10d dispatcher op stands for, from its inputs' shapes and values (its
    schema's positions, spec) on the default group; lost: what the format did not record."""
    lossy = [NO_PROCESS_GROUP, *lost]
    if dtype is None and spec.inp is not None:
        lossy.append("dtype not recorded (float32 assumed)")
    in_shape = arg(shapes, spec.inp)
    out_shape = arg(shapes, spec.out) if spec.out is not None else in_shape
    in_splits: tuple[int, ...] = ()
    out_splits: tuple[int, ...] = ()
    if spec.splits:
        out_splits = int_list(arg(values, spec.splits[0]), f"{spec.name}'s output split sizes")[0]
        in_splits = int_list(arg(values, spec.splits[1]), f"{spec.name}'s input split sizes")[0]
    root = as_int(arg(values, spec.root)) if spec.root is not None else None
    if spec.root is not None and root is None:
        lossy.append("root/peer not recorded")
    peer = ranks[root] if root is not None and ranks and 0 <= root < len(ranks) else root
    return Collective(
        name=spec.name,
        dtype=dtype or "float32",
        in_elems=numel(in_shape, f"{spec.name}'s input shape"),
        out_elems=numel(out_shape, f"{spec.name}'s output shape"),
        group=group,
        group_ranks=tuple(ranks),
        rank=rank,
        in_splits=in_splits,
        out_splits=out_splits,
        peer=peer,
        coalesced=count_tensors(in_shape, f"{spec.name}'s input shape") if "coalesced" in spec.name else None,
        lossy=tuple(lossy),
    )
