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
    # (start, end) of what it took, in µs of the trace's own clock (a kernel's, a Gloo annotation's): where
    # the trace records when it ran, None elsewhere; what merges a step's overlapping calls (replay/spans.py)
    recorded_span_us: tuple[float, float] | None = None


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


@dataclass(frozen=True)
class Call:
    """One collective as commbench will issue it again: a commbench op and variant, and the exact
    workload the trace recorded (element counts, never a size rounded to the op's S grid)."""

    op: str  # a commbench op's name: "all_reduce", "all_gather", "reduce_scatter_base", "all_to_all"...
    variant: str  # one of that op's variants ("flat", "list", "single", "uneven", "coalesced"...)
    dtype: str
    in_elems: int  # per rank, as recorded
    out_elems: int
    group_ranks: tuple[int, ...]  # global ranks of the group the job issued it on
    splits: tuple[tuple[int, ...], ...] = ()  # all_to_all: splits[src][dst] for every rank of the group
    peer: int | None = None  # root or peer, as a rank of the group
    tensors: int = 1  # tensors in a coalesced group / list form


@dataclass(frozen=True)
class Unmapped:
    """A recorded collective the replay cannot issue, and why (listed, never dropped silently)."""

    collective: Collective
    reason: str


@dataclass(frozen=True)
class Plan:
    """A job's communication as the replay issues it: one step's sequence in the job's order, each
    distinct call with its count per step and its recorded times, and what could not be mapped."""

    world_size: int  # ranks the recorded job's groups need
    sequence: tuple[Call, ...]  # one step's calls in issue order
    counts: tuple[tuple[Call, int], ...]  # each distinct call, its count per step (first-seen order)
    recorded_us: tuple[tuple[Call, tuple[float, ...]], ...]  # each distinct call's recorded times
    unmapped: tuple[Unmapped, ...]
    steps: int  # profiler steps the sequence was taken from (the counts are per step)
    digest: str  # the traces' combined digest: part of a replay run's fingerprint
    notes: tuple[str, ...] = ()  # assumptions stated in the output (one rank's trace stands for all...)
    # each step's communication in the trace as the replay's step measures it: the time some call of the
    # step was running, overlaps merged (spans.step_wall_us), one per step the sequence was taken from
    # that recorded spans; () where the trace records none
    recorded_wall_us: tuple[float, ...] = ()
