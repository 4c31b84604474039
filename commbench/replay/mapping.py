"""A job's recorded collectives onto commbench's ops and variants: the Plan the replay issues.

Each recorded name goes to the op and variant whose spec names it (its Recorded rule, ops/spec.py);
what cannot be issued goes to Plan.unmapped with its reason, never dropped; what had to be assumed
is said in Plan.notes, once each, with the ops it applies to. The ranks' records of one call are
matched (commbench/replay/align.py): a collective per process group (by Seq, else Comms Id, else
the order within the group), a send with the receive its peer recorded (one one-way transfer); the
ranks' orders are merged into one sequence per step. One rank's trace stands for all when it is the
only one. Where the steps issue the same calls with other counts (an MoE router's splits), every
step is replayed as recorded, in turn; where they issue other calls, the sequence most steps issue.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from commbench.replay.adapter import recorded_names, rooted, rule
from commbench.replay.align import Matched, match
from commbench.replay.readers.fields import NO_PROCESS_GROUP, NO_SPLITS
from commbench.replay.record import Call, Collective, Plan, Trace, Unmapped
from commbench.replay.spans import step_wall_us
from commbench.run.config import DTYPES

SUM_ASSUMED = "the reduce op is recorded by no trace format: sum assumed"
OUTSIDE_STEPS = "issued outside the profiler steps (set-up, not part of a step)"
ROOT_ASSUMED = "root not recorded: rank 0 of the group assumed"
OTHER_SPLITS = "uneven all_to_all: the other ranks' splits are not in this trace (give every rank's trace)"
UNKNOWN_SPLITS = (
    "its splits are not recorded (a Flight Recorder entry holds only this rank's totals, not whom it sent them to): "
    "not replayed, as an even all_to_all would be another exchange; give the job's profiler traces for its splits"
)
ONE_SIDE = (
    "rank {rank}'s trace alone: each send/recv is replayed as one one-way transfer between rank {rank} and the "
    "peer it names (the peer's side assumed, its trace not given; transfers between other ranks are not in it)"
)
ONE_RANK_BY_COUNTS = (
    "rank {rank}'s trace names no process group of its collectives, and the counts of its {op} put it on a group "
    "of one rank: its other collectives' groups are assumed (the default group's) and may be wrong (one issued on "
    "a group of one rank issues no communication)"
)


@dataclass(frozen=True)
class _Mapped:
    """A matched call as the replay issues it, with the record it was built from and what it assumed."""

    call: Call
    record: Collective  # the lowest rank's record: its step and recorded time
    assumed: tuple[str, ...]


def plan(traces: Sequence[Trace]) -> Plan:
    """The Plan of one job's traces (one per rank, or one rank's standing for all)."""
    traces = sorted(traces, key=lambda t: t.rank)
    notes: list[str] = []
    for t in traces:
        notes += [n for n in t.notes if n not in notes]
    world = max(
        [t.world_size or 0 for t in traces] + [max(c.group_ranks, default=-1) + 1 for c in traces[0].collectives]
    )
    if len(traces) == 1:
        notes.append(
            f"one rank's trace (rank {traces[0].rank}) stands for all {world} ranks: the job is assumed symmetric "
            "(every rank issues the same collectives with the same sizes)"
        )
    matched = match(traces, world, notes)
    unmapped = list(matched.unmapped)
    mapped: dict[int, _Mapped] = {}
    for node_id, node in enumerate(matched.nodes):
        assumed: list[str] = list(node.record.lossy)
        outcome = node.why or _call(node.record, node.ranks, node.matrix, node.transfer, assumed)
        if isinstance(outcome, str):
            unmapped.append(Unmapped(node.record, outcome))
        elif traces[0].steps and node.record.step is None:
            unmapped.append(Unmapped(node.record, OUTSIDE_STEPS))
        else:
            mapped[node_id] = _Mapped(outcome, node.record, tuple(assumed))
    notes += _corrected_groups(matched)
    if len(traces) == 1 and any(m.call.src is not None for m in mapped.values()):
        notes.append(ONE_SIDE.format(rank=traces[0].rank))
    steps = _choose_steps(_by_step(matched, mapped), notes)
    return _assembled(traces, world, steps, unmapped, notes)


def _by_step(matched: Matched, mapped: dict[int, _Mapped]) -> dict[int | None, list[_Mapped]]:
    """Each step's mapped calls, in the one order the ranks' orders merge into (align.merged)."""
    steps: dict[int | None, list[int]] = defaultdict(list)
    for node_id, m in mapped.items():
        steps[m.record.step].append(node_id)
    return {step: [mapped[i] for i in matched.order(set(ids))] for step, ids in steps.items()}


def _assembled(
    traces: Sequence[Trace], world: int, steps: list[list[_Mapped]], unmapped: list[Unmapped], notes: list[str]
) -> Plan:
    sequences = [tuple(m.call for m in step) for step in steps]
    occurrences = Counter(call for sequence in sequences for call in sequence)
    distinct = list(dict.fromkeys(call for sequence in sequences for call in sequence))
    times: dict[Call, list[float]] = defaultdict(list)
    for m in (m for step in steps for m in step):
        if m.record.recorded_us is not None:
            times[m.call].append(m.record.recorded_us)
    reducing = [op for op in dict.fromkeys(c.op for c in distinct) if (r := rule(op)) is not None and r.reduces]
    if reducing:
        notes.append(f"{SUM_ASSUMED} ({', '.join(reducing)})")
    notes += _assumptions(steps, one_group=all(len(t.process_groups) == 1 for t in traces))
    return Plan(
        world_size=world,
        sequence=sequences[0] if sequences else (),
        counts=tuple((call, per_step(occurrences[call], len(steps))) for call in distinct),
        recorded_us=tuple((call, tuple(times[call])) for call in distinct),
        unmapped=tuple(unmapped),
        steps=len(steps),
        digest=hashlib.sha256("".join(sorted(t.digest for t in traces)).encode()).hexdigest(),
        notes=tuple(notes),
        recorded_wall_us=tuple(w for step in steps if (w := step_wall_us(m.record for m in step)) is not None),
        step_sequences=tuple(sequences) if len(set(sequences)) > 1 else (),
    )


def per_step(count: int, steps: int) -> int | float:
    """A count over `steps` steps, per step: whole where it divides (2, not 2.0), else a fraction."""
    steps = max(steps, 1)
    return count // steps if count % steps == 0 else round(count / steps, 3)


def _assumptions(steps: list[list[_Mapped]], one_group: bool) -> list[str]:
    """Each thing assumed for the replayed calls, once, with how many of which op it applies to per
    step. A trace that names no group of its collectives says nothing where it lists one group only."""
    tally: dict[str, Counter[str]] = defaultdict(Counter)
    for m in (m for step in steps for m in step):
        for what in m.assumed:
            if not (what == NO_PROCESS_GROUP and one_group):
                tally[what][m.call.op] += 1
    return [
        f"{what} ({', '.join(f'{per_step(n, len(steps))} {op}' for op, n in ops.items())} per step)"
        for what, ops in tally.items()
    ]


def _corrected_groups(matched: Matched) -> list[str]:
    """The ranks whose traces name no group, and on which a collective's own counts found a group of one."""
    found = {c.rank: c.name for c in matched.solo_by_counts}
    return [ONE_RANK_BY_COUNTS.format(rank=rank, op=op) for rank, op in sorted(found.items())]


def _shape(call: Call) -> tuple:
    """A call but for its counts: what two steps that differ only by their counts share."""
    return call.op, call.variant, call.dtype, call.communicator, call.peer, call.src, call.dst, call.tensors


def _choose_steps(by_step: dict[int | None, list[_Mapped]], notes: list[str]) -> list[list[_Mapped]]:
    """The steps whose calls are replayed: those that issue the shape of sequence most steps issue
    (the later on a tie: later steps are the steady state). Where they also issue the same counts,
    one of them stands for all; where the counts differ, each is replayed as recorded (said)."""
    if not by_step:
        return []
    shapes: dict[tuple, list[int | None]] = defaultdict(list)
    for step, calls in by_step.items():
        shapes[tuple(_shape(m.call) for m in calls)].append(step)
    best = max(shapes, key=lambda shape: (len(shapes[shape]), max(s or 0 for s in shapes[shape])))
    chosen = shapes[best]
    others = sorted(s for shape, steps in shapes.items() if shape != best for s in steps if s is not None)
    named = ", ".join(str(s) for s in chosen)
    if others:
        notes.append(
            f"profiler step(s) {', '.join(map(str, others))} issue another sequence than step(s) {named}; "
            "the sequence of the latter is replayed"
        )
    sequences = [by_step[s] for s in chosen]
    if len({tuple(m.call for m in calls) for calls in sequences}) == 1:
        return sequences
    changing = dict.fromkeys(m.call.op for calls in zip(*sequences) if len({c.call for c in calls}) > 1 for m in calls)
    notes.append(
        f"profiler steps {named} issue the same calls with other counts (those of {', '.join(changing)} change "
        "from step to step): each step is replayed as recorded, the step measurement issuing them in turn"
    )
    return sequences


def _call(
    c: Collective,
    ranks: tuple[int, ...],
    matrix: tuple[tuple[int, ...], ...] | None,
    transfer: tuple[int, int] | None,
    assumed: list[str],
) -> Call | str:
    """The call that issues c again on its group `ranks`, or why it cannot be issued. matrix: an
    all_to_all's splits in rows [src][dst] from every rank of the group; transfer: a send/recv's
    (sender, receiver), global ranks. What had to be assumed is added to `assumed`."""
    if c.name not in recorded_names():
        return f"{c.name!r} is no collective commbench issues"
    op, variant = recorded_names()[c.name]
    if op != "barrier" and c.dtype not in DTYPES:
        return f"dtype {c.dtype}: commbench's ops carry {', '.join(DTYPES)}"
    if op != "barrier" and not (c.in_elems or c.out_elems):
        return "no sizes recorded"
    peer = src = dst = None
    if rooted(op):
        peer = ranks.index(c.peer) if c.peer in ranks else None
        if peer is None:
            assumed.append(ROOT_ASSUMED)
            peer = 0
    if transfer is not None:
        if not all(end in ranks for end in transfer):
            return f"{c.name} between ranks {transfer[0]} and {transfer[1]}, outside its group {list(ranks)}"
        src, dst = (ranks.index(end) for end in transfer)
    splits: tuple[tuple[int, ...], ...] = ()
    if op == "all_to_all" and NO_SPLITS in c.lossy:
        return UNKNOWN_SPLITS
    if op == "all_to_all" and variant == "single" and (c.in_splits or c.out_splits):
        outcome = _all_to_all(c, matrix)
        if isinstance(outcome, str):
            return outcome
        variant, splits = outcome
    tensors = c.coalesced or 1
    if c.coalesced and op != "grouped_all_gather":
        assumed.append(f"coalesced {c.name} replayed as one {op} of the group's total")
        tensors = 1
    return Call(
        op=op,
        variant=variant,
        dtype=c.dtype,
        in_elems=c.in_elems,
        out_elems=c.out_elems,
        group_ranks=ranks,
        splits=splits,
        peer=peer,
        tensors=tensors,
        group=group_name(c),
        src=src,
        dst=dst,
    )


def group_name(c: Collective) -> str:
    """The communicator a record names, alike on every rank: "" for the job's default group (torch
    names it "0", its description "default_pg") or where the trace names none, else its name."""
    name = c.group.strip()
    return "" if c.group_desc == "default_pg" or name in ("", "0") else name


def row_width(c: Collective) -> int | None:
    """Elements per split unit: an all_to_all_single's splits count rows of its tensor's first
    dimension ([tokens, hidden]: hidden elements a row), so elements = splits x this. From the
    recorded counts: in_elems / sum(in_splits) (else the output's); None where it is no whole number."""
    for elems, splits in ((c.in_elems, c.in_splits), (c.out_elems, c.out_splits)):
        if sum(splits) > 0:
            return elems // sum(splits) if elems % sum(splits) == 0 else None
    return 1


def _all_to_all(
    c: Collective, matrix: tuple[tuple[int, ...], ...] | None
) -> tuple[str, tuple[tuple[int, ...], ...]] | str:
    """An all_to_all_single with recorded splits: its variant and splits in elements, or why not."""
    if any("splits cut" in what for what in c.lossy):
        return "single", ()  # Kineto kept 29 + 1 of the splits: the total stands, split evenly (said in the notes)
    width = row_width(c)
    if width is None:
        return f"its splits ({sum(c.in_splits)} in, {sum(c.out_splits)} out) do not divide its {c.in_elems} elements"
    if matrix is None:
        return OTHER_SPLITS if len(set(c.in_splits) | set(c.out_splits)) > 1 else ("single", ())
    if len({n for row in matrix for n in row}) == 1:
        return "single", ()
    return "uneven", tuple(tuple(n * width for n in row) for row in matrix)


def unmapped_shares(p: Plan) -> list[tuple[str, int, float | None]]:
    """Each reason a recorded collective was not replayed: how many, and their share of the recorded
    time of every collective the plan saw (None where the trace records no time)."""
    mapped_us = sum(sum(times) for _, times in p.recorded_us)
    unmapped_us = sum(u.collective.recorded_us or 0.0 for u in p.unmapped)
    total = mapped_us + unmapped_us
    by_reason: dict[str, list[Unmapped]] = defaultdict(list)
    for u in p.unmapped:
        by_reason[u.reason].append(u)
    return [
        (reason, len(us), sum(u.collective.recorded_us or 0.0 for u in us) / total if total else None)
        for reason, us in by_reason.items()
    ]
