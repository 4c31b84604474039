"""A job's recorded collectives onto commbench's ops and variants: the Plan the replay issues.

Each recorded name goes to the op and variant whose spec names it (its Recorded rule, ops/spec.py); what cannot be issued goes to
Plan.unmapped with its reason, never dropped; what had to be assumed is said in Plan.notes. Several
ranks' traces are aligned per process group (by Seq, else Comms Id, else the order within the
group); one rank's trace stands for all when it is the only one."""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Sequence

from commbench.errors import UserError
from commbench.ops.spec import Recorded
from commbench.replay.adapter import recorded_names, rooted, rule
from commbench.replay.record import Call, Collective, Plan, Trace, Unmapped
from commbench.run.config import DTYPES

SUM_ASSUMED = "the reduce op is recorded by no trace format: sum assumed"
OUTSIDE_STEPS = "issued outside the profiler steps (set-up, not part of a step)"


def plan(traces: Sequence[Trace]) -> Plan:
    """The Plan of one job's traces (one per rank, or one rank's standing for all)."""
    traces = sorted(traces, key=lambda t: t.rank)
    reference = traces[0]
    notes: list[str] = []
    for t in traces:
        notes += [n for n in t.notes if n not in notes]
    world = max(
        [t.world_size or 0 for t in traces] + [max(c.group_ranks, default=-1) + 1 for c in reference.collectives]
    )
    unmapped: list[Unmapped] = []
    if len(traces) == 1:
        notes.append(
            f"one rank's trace (rank {reference.rank}) stands for all {world} ranks: the job is assumed symmetric "
            "(every rank issues the same collectives with the same sizes)"
        )
        matrices: dict[int, tuple[tuple[int, ...], ...]] = {}
    else:
        matrices = _align(traces, unmapped, notes)
    lossy: Counter[str] = Counter()
    by_step: dict[int | None, list[tuple[Call, Collective]]] = defaultdict(list)
    for i, c in enumerate(reference.collectives):
        if any(u.collective is c for u in unmapped):
            continue
        call = _call(c, world, matrices.get(i), unmapped, lossy)
        if call is None:
            continue
        if reference.steps and c.step is None:
            unmapped.append(Unmapped(c, OUTSIDE_STEPS))
            continue
        by_step[c.step].append((call, c))
    sequence, steps_used = _choose_step(by_step, notes)
    counts = Counter(call for call, _ in sequence)
    distinct = list(dict.fromkeys(call for call, _ in sequence))
    times: dict[Call, list[float]] = defaultdict(list)
    for step in steps_used:
        for call, c in by_step[step]:
            if c.recorded_us is not None:
                times[call].append(c.recorded_us)
    if any((r := rule(call.op)) is not None and r.reduces for call in distinct):
        notes.append(SUM_ASSUMED)
    notes += [f"{what} ({n} collectives)" for what, n in lossy.items()]
    return Plan(
        world_size=world,
        sequence=tuple(call for call, _ in sequence),
        counts=tuple((call, counts[call]) for call in distinct),
        recorded_us=tuple((call, tuple(times[call])) for call in distinct),
        unmapped=tuple(unmapped),
        steps=len(steps_used),
        digest=hashlib.sha256("".join(sorted(t.digest for t in traces)).encode()).hexdigest(),
        notes=tuple(notes),
    )


def _choose_step(
    by_step: dict[int | None, list[tuple[Call, Collective]]], notes: list[str]
) -> tuple[list[tuple[Call, Collective]], list[int | None]]:
    """The step sequence most steps issue (the last of the most frequent on a tie: later steps are
    the steady state), and the steps that issue it; the others are named in the notes."""
    if not by_step:
        return [], []
    shapes: dict[tuple[Call, ...], list[int | None]] = defaultdict(list)
    for step, pairs in by_step.items():
        shapes[tuple(call for call, _ in pairs)].append(step)
    best = max(shapes, key=lambda seq: (len(shapes[seq]), max(s or 0 for s in shapes[seq])))
    chosen = shapes[best]
    others = sorted(s for seq, steps in shapes.items() if seq != best for s in steps if s is not None)
    if others:
        notes.append(
            f"profiler step(s) {', '.join(map(str, others))} issue another sequence than step(s) "
            f"{', '.join(str(s) for s in chosen)}; the sequence of the latter is replayed"
        )
    return by_step[chosen[-1]], chosen


def _group_rank(c: Collective, world: int, global_rank: int | None) -> int | None:
    ranks = c.group_ranks or tuple(range(world))
    if global_rank is None:
        return None
    return ranks.index(global_rank) if global_rank in ranks else None


def _call(
    c: Collective,
    world: int,
    matrix: tuple[tuple[int, ...], ...] | None,
    unmapped: list[Unmapped],
    lossy: Counter[str],
) -> Call | None:
    """The call that issues c again, or None (c added to unmapped with its reason)."""
    for what in c.lossy:
        lossy[what] += 1
    if c.name not in recorded_names():
        unmapped.append(Unmapped(c, f"{c.name!r} is no collective commbench issues"))
        return None
    op, variant = recorded_names()[c.name]
    if op != "barrier" and c.dtype not in DTYPES:
        unmapped.append(Unmapped(c, f"dtype {c.dtype}: commbench's ops carry {', '.join(DTYPES)}"))
        return None
    if op != "barrier" and not (c.in_elems or c.out_elems):
        unmapped.append(Unmapped(c, "no sizes recorded"))
        return None
    ranks = c.group_ranks or tuple(range(world))
    peer = None
    p2p = recorded_rule(op).peer
    if rooted(op) or p2p:
        peer = _group_rank(c, world, c.peer)
        if peer is None:
            what = "root" if rooted(op) else "peer"
            if p2p:
                unmapped.append(Unmapped(c, f"{c.name} with no {what} recorded"))
                return None
            lossy[f"{what} not recorded: rank 0 of the group assumed"] += 1
            peer = 0
    if p2p:
        lossy["send/recv replayed as a pair exchange (each side sends and receives)"] += 1
    splits: tuple[tuple[int, ...], ...] = ()
    if op == "all_to_all" and variant == "single" and (c.in_splits or c.out_splits):
        if any("splits cut" in what for what in c.lossy):
            pass  # Kineto kept 29 + 1 of the splits: the total stands, split evenly (said in the notes)
        elif matrix is not None:
            if len({v for row in matrix for v in row}) > 1:
                variant, splits = "uneven", matrix
        elif len(set(c.in_splits) | set(c.out_splits)) > 1:
            unmapped.append(
                Unmapped(
                    c, "uneven all_to_all: the other ranks' splits are not in this trace (give every rank's trace)"
                )
            )
            return None
    tensors = c.coalesced or 1
    if c.coalesced and op != "grouped_all_gather":
        lossy[f"coalesced {c.name} replayed as one {op} of the group's total"] += 1
        tensors = 1
    return Call(
        op=op,
        variant=variant,
        dtype=c.dtype,
        in_elems=c.in_elems,
        out_elems=c.out_elems,
        group_ranks=tuple(ranks),
        splits=splits,
        peer=peer,
        tensors=tensors,
    )


def recorded_rule(op: str) -> Recorded:
    """The replay rule of an op a recorded name mapped to (it has one: recorded_names() holds only those)."""
    found = rule(op)
    assert found is not None, op
    return found


def _key(c: Collective, position: int, by: str) -> object:
    return {"seq": c.seq, "comms_id": c.comms_id}.get(by, position)


def _disagreement(c: Collective, mate: Collective) -> str | None:
    """How another rank's record of the collective c differs from c, None where it agrees."""
    if (mate.name, mate.dtype) != (c.name, c.dtype):
        return "issued another collective here"
    if c.group_ranks and mate.group_ranks and mate.group_ranks != c.group_ranks:
        return "issued it on another group"
    op = recorded_names().get(c.name, ("", ""))[0]
    if (r := rule(op)) is not None and r.same_counts and (mate.in_elems, mate.out_elems) != (c.in_elems, c.out_elems):
        return f"issued it with {mate.in_elems:,} elements, not {c.in_elems:,}"
    return None


class _Agreement:
    """How many of the reference's collectives each other rank agrees and disagrees on: traces that
    disagree on most are two jobs' (or two runs'), refused whole; a few disagreements stay unmapped."""

    def __init__(self) -> None:
        self.agreed: Counter[int] = Counter()
        self.differ: dict[int, list[str]] = defaultdict(list)

    def check(self, traces: Sequence[Trace]) -> None:
        by_rank = {t.rank: t for t in traces}
        for r, whats in self.differ.items():
            if len(whats) > self.agreed[r]:
                raise UserError(
                    f"{traces[0].path} and {by_rank[r].path} disagree on {len(whats)} of their "
                    f"{len(whats) + self.agreed[r]} common collectives (rank {r} {whats[0]}): traces of two "
                    "different jobs; give the traces of one job"
                )


def _align(
    traces: Sequence[Trace], unmapped: list[Unmapped], notes: list[str]
) -> dict[int, tuple[tuple[int, ...], ...]]:
    """Match each collective of the reference (lowest) rank with the same one on the other ranks of its
    group; those that disagree (op, dtype, group or counts) or are missing go to unmapped, unless
    most disagree (two jobs, refused). Returns, for the reference's uneven all_to_alls (by index),
    the full splits matrix [src][dst] built from every rank's in_splits."""
    reference = traces[0]
    by_rank = {t.rank: t for t in traces}
    matrices: dict[int, tuple[tuple[int, ...], ...]] = {}
    per_group: dict[str, list[int]] = defaultdict(list)
    for i, c in enumerate(reference.collectives):
        per_group[c.group].append(i)
    used = set()
    agreement = _Agreement()
    for group, indexes in per_group.items():
        first = reference.collectives[indexes[0]]
        members = [r for r in (first.group_ranks or sorted(by_rank)) if r in by_rank]
        others = {r: [c for c in by_rank[r].collectives if c.group == group] for r in members if r != reference.rank}
        every = [reference.collectives[i] for i in indexes] + [c for cs in others.values() for c in cs]
        by = (
            "seq"
            if all(c.seq is not None for c in every)
            else "comms_id"
            if all(c.comms_id for c in every)
            else "order"
        )
        used.add(by)
        keyed = {r: {_key(c, k, by): c for k, c in enumerate(cs)} for r, cs in others.items()}
        for position, i in enumerate(indexes):
            c = reference.collectives[i]
            key = _key(c, position, by)
            mates = {r: keyed[r].get(key) for r in keyed}
            missing = [r for r, m in mates.items() if m is None]
            if missing:
                unmapped.append(
                    Unmapped(c, f"not recorded on rank {', '.join(map(str, missing))} (the ranks' traces disagree)")
                )
                continue
            differ = {r: what for r, m in mates.items() if m is not None and (what := _disagreement(c, m))}
            for r in mates:
                if r in differ:
                    agreement.differ[r].append(differ[r])
                else:
                    agreement.agreed[r] += 1
            if differ:
                r, what = next(iter(differ.items()))
                unmapped.append(Unmapped(c, f"rank {r} {what} (the ranks' traces disagree)"))
                continue
            if c.in_splits and len(members) == len(c.group_ranks or members):
                rows = {c.rank: c.in_splits, **{r: m.in_splits for r, m in mates.items() if m is not None}}
                matrices[i] = tuple(rows[r] for r in (c.group_ranks or sorted(rows)))
    agreement.check(traces)
    keys = {"seq": "Seq / collective_seq_id", "comms_id": "Comms Id", "order": "the order within each group"}
    notes.append(f"{len(traces)} ranks' traces aligned per process group by {', '.join(keys[b] for b in sorted(used))}")
    return matrices


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
