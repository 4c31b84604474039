"""What every trace reader yields, whatever the format: one normalised record per collective, and
the trace it came from. The readers (commbench/replay/readers/) fill these; the mapping onto
commbench's ops and the `replay` command read only these."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Collective:
    """One collective as a trace recorded it, on the rank whose trace it came from."""

    name: str  # the trace's own name for it, lower case: "allreduce", "all_gather_into_tensor", "alltoallv"...
    dtype: str  # torch's name without the prefix: "float32", "bfloat16", "int64"
    in_elems: int  # element counts, never bytes
    out_elems: int
    group: str  # the process group's name ("0", "default_pg", ...)
    group_ranks: tuple[int, ...]  # global ranks of the group, in group order; () where not recorded
    rank: int  # the global rank whose trace recorded it
    in_splits: tuple[int, ...] = ()  # per-peer element counts (all_to_all); () = even or not recorded
    out_splits: tuple[int, ...] = ()
    peer: int | None = None  # root (broadcast/reduce/gather/scatter) or peer (send/recv), global rank
    step: int | None = None  # the profiler step it was issued in (ProfilerStep#N), None outside steps
    recorded_us: float | None = None  # what it took in the trace (GPU kernel dur, duration_ms...)
    seq: int | None = None  # the order key across ranks (Seq, collective_seq_id), None where absent
    comms_id: str | None = None  # Kineto's "Comms Id", where present
    coalesced: int | None = None  # the id of the coalescing group it was issued in, None alone
    group_desc: str = ""  # "Process Group Description" / pg_desc, "" where absent
    lossy: tuple[str, ...] = ()  # what the reader had to assume or lost ("splits cut at 30", "dtype assumed")


@dataclass(frozen=True)
class Trace:
    """One file's collectives in issue order, and what the file says about its job."""

    path: str
    format: str  # "kineto", "execution-trace", "flight-recorder"
    rank: int
    world_size: int | None  # the job's world (distributedInfo, pg_config...), None where unrecorded
    backend: str = ""  # "nccl 2.17.1", "gloo" where recorded
    digest: str = ""  # sha256 of the file's bytes: part of a replay's fingerprint in the history
    collectives: tuple[Collective, ...] = ()
    steps: tuple[int, ...] = ()  # the profiler steps the trace holds, in order
    notes: tuple[str, ...] = field(default=())  # what the reader assumed for the whole trace
