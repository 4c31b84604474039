"""The ranks' records of one job matched into the job's calls, and the ranks' orders merged into one.

A collective is one call on every rank of its group: the record of the group's lowest rank whose
trace is given stands for it, matched with the other ranks' by Seq, else Comms Id, else the order
within the group. Records that disagree (op, dtype, group, counts) or that a rank lacks are listed,
never replayed; traces that disagree on most are two jobs', refused whole. A send is one call with
the receive its peer recorded (rank r's k-th send to d is rank d's k-th receive from r): one one-way
transfer, matched apart from the collectives. A collective on a group of one rank (recorded so, or
so its own counts say where the trace names no group) issues nothing: listed with that reason.

Each rank's trace orders the calls it takes part in; merged() orders a step's calls for every rank
at once, keeping each rank's own order wherever the orders agree.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from commbench.errors import UserError
from commbench.replay.adapter import recorded_names, rule
from commbench.replay.readers.fields import NO_PROCESS_GROUP
from commbench.replay.record import Collective, Trace, Unmapped

ONE_RANK = "a group of one rank (rank {rank}): it issues no communication"
DISAGREE = "(the ranks' traces disagree)"
SENDS = "send"  # the recorded name of a transfer's sending side (its receiving side is "recv")


@dataclass(frozen=True)
class Node:
    """One call of the job, as the record that stands for it (the lowest given rank's; a transfer's
    sender's where its trace is given) and what matching the ranks found."""

    record: Collective
    ranks: tuple[int, ...]  # the global ranks of its group
    why: str | None = None  # why it issues nothing the replay can issue (a group of one rank...)
    matrix: tuple[tuple[int, ...], ...] | None = None  # all_to_all: each rank's input splits as recorded, [src][dst]
    transfer: tuple[int, int] | None = None  # send/recv: (sender, receiver), global ranks


@dataclass
class Matched:
    """The job's calls, what could not be matched, and each given rank's order of its calls."""

    nodes: list[Node] = field(default_factory=list)
    unmapped: list[Unmapped] = field(default_factory=list)
    solo_by_counts: list[Collective] = field(default_factory=list)  # a group of one found by counts alone
    chains: dict[int, list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))  # rank -> (pos, node)

    def add(self, node: Node, at: dict[int, int]) -> None:
        """A call, and where each rank's trace holds it (rank -> position in that trace)."""
        for rank, position in at.items():
            self.chains[rank].append((position, len(self.nodes)))
        self.nodes.append(node)

    def order(self, ids: set[int]) -> list[int]:
        """The calls `ids` in the one order every rank issues them (merged)."""
        return merged([[n for _, n in sorted(chain) if n in ids] for _, chain in sorted(self.chains.items())])


@dataclass(frozen=True)
class _Placed:
    """A record with the group it ran on: its ranks, the key its records are matched under across
    ranks (the group's recorded name), and why it cannot be replayed where its group says so."""

    position: int  # in its trace
    record: Collective
    ranks: tuple[int, ...]
    key: str
    why: str | None = None


def match(traces: Sequence[Trace], world: int, notes: list[str]) -> Matched:
    """The calls of one job's traces (sorted by rank: one per rank, or one rank's standing for all)."""
    out = Matched()
    transfers: list[_Placed] = []
    collectives: dict[int, dict[str, list[_Placed]]] = {t.rank: defaultdict(list) for t in traces}
    for t in traces:
        for position, c in enumerate(t.collectives):
            placed = _placed(position, c, world, out)
            is_transfer = (named := recorded_names().get(c.name)) is not None and _rule_peer(named[0])
            if is_transfer:
                transfers.append(placed)
            else:
                collectives[t.rank][placed.key].append(placed)
    used = _collectives(traces, collectives, out)
    _transfers(traces, transfers, out)
    if len(traces) > 1:
        keys = {"seq": "Seq / collective_seq_id", "comms_id": "Comms Id", "order": "the order within each group"}
        by = ", ".join(keys[b] for b in sorted(used)) or keys["order"]
        paired = "; each send paired with its peer's receive" if transfers else ""
        notes.append(f"{len(traces)} ranks' traces aligned per process group by {by}{paired}")
    return out


def _rule_peer(op: str) -> bool:
    found = rule(op)
    return found is not None and found.peer


def _placed(position: int, c: Collective, world: int, out: Matched) -> _Placed:
    """The record on its group: as recorded, unless its own counts say otherwise (an all_gather's
    output is n inputs: out = in is a group of one rank, which a trace naming no group cannot say)."""
    ranks = c.group_ranks or tuple(range(world))
    named = recorded_names().get(c.name)
    recorded = rule(named[0]) if named is not None else None
    implied = recorded.group_size(c.in_elems, c.out_elems) if recorded is not None else None
    if implied is not None and implied != len(ranks):
        if implied != 1:
            why = (
                f"its counts ({c.in_elems:,} in, {c.out_elems:,} out) say a group of {implied} ranks, "
                f"not the {len(ranks)} of the group its trace records"
            )
            return _Placed(position, c, ranks, c.group, why)
        if NO_PROCESS_GROUP in c.lossy:
            out.solo_by_counts.append(c)
        return _Placed(position, c, (c.rank,), f"{c.group} (rank {c.rank} alone)", ONE_RANK.format(rank=c.rank))
    if len(ranks) == 1 and not (recorded is not None and recorded.peer):
        return _Placed(position, c, ranks, c.group, ONE_RANK.format(rank=ranks[0]))
    return _Placed(position, c, ranks, c.group)


def _collectives(traces: Sequence[Trace], records: dict[int, dict[str, list[_Placed]]], out: Matched) -> set[str]:
    """Each group's collectives matched across the given ranks of the group; returns the keys used."""
    given = [t.rank for t in traces]
    alone = len(traces) == 1
    done: set[str] = set()
    used: set[str] = set()
    agreement = _Agreement()
    for rank in given:
        for key, mine in records[rank].items():
            if key in done:
                continue
            done.add(key)
            members = [rank] if alone else sorted({rank, *(r for r in mine[0].ranks if r in records)})
            others = {r: records[r].get(key, []) for r in members if r != rank}
            every = [p.record for p in mine] + [p.record for ps in others.values() for p in ps]
            by = _matched_by(every)
            used.add(by)
            keyed = {r: {_key(p.record, k, by): p for k, p in enumerate(ps)} for r, ps in others.items()}
            for k, placed in enumerate(mine):
                mates = {r: keyed[r].pop(_key(placed.record, k, by), None) for r in keyed}
                node = _node(placed, mates, len(members), agreement, out)
                if node is not None:
                    found = {r: m.position for r, m in mates.items() if m is not None}
                    out.add(node, {rank: placed.position, **found})
            for left in keyed.values():
                for p in left.values():
                    out.unmapped.append(Unmapped(p.record, f"not recorded on rank {rank} {DISAGREE}"))
    agreement.check(traces)
    return used


def _node(
    placed: _Placed, mates: dict[int, _Placed | None], members: int, agreement: _Agreement, out: Matched
) -> Node | None:
    """The call a record and its mates on the other ranks stand for, or None (listed in out.unmapped)."""
    c = placed.record
    missing = [r for r, m in mates.items() if m is None]
    if missing:
        out.unmapped.append(Unmapped(c, f"not recorded on rank {', '.join(map(str, missing))} {DISAGREE}"))
        return None
    differ = {r: what for r, m in mates.items() if m is not None and (what := _disagreement(c, m.record))}
    for r in mates:
        agreement.record(r, differ.get(r))
    if differ:
        r, what = next(iter(differ.items()))
        out.unmapped.append(Unmapped(c, f"rank {r} {what} {DISAGREE}"))
        return None
    matrix = None
    if c.in_splits and members == len(placed.ranks):
        rows = {c.rank: c.in_splits, **{r: m.record.in_splits for r, m in mates.items() if m is not None}}
        matrix = tuple(rows[r] for r in placed.ranks) if all(r in rows for r in placed.ranks) else None
    return Node(c, placed.ranks, placed.why, matrix)


def _transfers(traces: Sequence[Trace], placed: list[_Placed], out: Matched) -> None:
    """Each send paired with the receive its peer recorded, in order per (sender, receiver): one
    one-way transfer. From one rank's trace alone each side is a transfer of its own (its peer's
    side assumed)."""
    sends: dict[tuple[int, int], list[_Placed]] = defaultdict(list)
    recvs: dict[tuple[int, int], list[_Placed]] = defaultdict(list)
    for p in placed:
        c = p.record
        if c.peer is None:
            out.unmapped.append(Unmapped(c, f"{c.name} with no peer recorded"))
        elif c.name == SENDS:
            sends[(c.rank, c.peer)].append(p)
        else:
            recvs[(c.peer, c.rank)].append(p)
    given = {t.rank for t in traces}
    for ends in dict.fromkeys([*sends, *recvs]):
        sent, received = sends.get(ends, []), recvs.get(ends, [])
        if not set(ends) <= given:  # the peer's trace is not given: one side alone
            for p in sent + received:
                out.add(Node(p.record, p.ranks, transfer=ends), {p.record.rank: p.position})
            continue
        for s, r in zip(sent, received):
            if (r.record.dtype, r.record.in_elems) != (s.record.dtype, s.record.in_elems):
                why = f"rank {ends[1]} received {r.record.in_elems:,} {r.record.dtype} elements, not {s.record.in_elems:,} {s.record.dtype}"
                out.unmapped.append(Unmapped(s.record, f"{why} {DISAGREE}"))
                continue
            out.add(Node(s.record, s.ranks, transfer=ends), {ends[0]: s.position, ends[1]: r.position})
        for s in sent[len(received) :]:
            out.unmapped.append(Unmapped(s.record, f"not received on rank {ends[1]} {DISAGREE}"))
        for r in received[len(sent) :]:
            out.unmapped.append(Unmapped(r.record, f"not sent by rank {ends[0]} {DISAGREE}"))


def merged(chains: list[list[int]]) -> list[int]:
    """One order of the calls in `chains` (each rank's calls in its own order, lowest rank first) that
    keeps every rank's order where they agree: a call goes once it heads every chain that holds it,
    the lowest rank's first. Where the orders cross (two ranks that each send before they receive),
    the lowest rank's next call goes, and the other chains take it when they reach it."""
    holders = Counter(n for chain in chains for n in chain)
    heads = [0] * len(chains)
    at_head: Counter[int] = Counter()
    done: set[int] = set()

    def settle(i: int) -> None:
        while heads[i] < len(chains[i]) and chains[i][heads[i]] in done:
            heads[i] += 1
        if heads[i] < len(chains[i]):
            at_head[chains[i][heads[i]]] += 1

    for i in range(len(chains)):
        settle(i)
    out: list[int] = []
    while live := [i for i in range(len(chains)) if heads[i] < len(chains[i])]:
        ready = [i for i in live if at_head[chains[i][heads[i]]] == holders[chains[i][heads[i]]]]
        node = chains[(ready or live)[0]][heads[(ready or live)[0]]]
        done.add(node)
        out.append(node)
        for i in live:
            if chains[i][heads[i]] == node:
                heads[i] += 1
                settle(i)
    return out


def _matched_by(records: list[Collective]) -> str:
    if all(c.seq is not None for c in records):
        return "seq"
    return "comms_id" if all(c.comms_id for c in records) else "order"


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
    """How many of the collectives each rank agrees and disagrees on with the group's lowest rank:
    traces that disagree on most are two jobs' (or two runs'), refused whole; a few stay unmapped."""

    def __init__(self) -> None:
        self.agreed: Counter[int] = Counter()
        self.differ: dict[int, list[str]] = defaultdict(list)

    def record(self, rank: int, what: str | None) -> None:
        if what is None:
            self.agreed[rank] += 1
        else:
            self.differ[rank].append(what)

    def check(self, traces: Sequence[Trace]) -> None:
        by_rank = {t.rank: t for t in traces}
        for r, whats in self.differ.items():
            if len(whats) > self.agreed[r]:
                raise UserError(
                    f"{traces[0].path} and {by_rank[r].path} disagree on {len(whats)} of their "
                    f"{len(whats) + self.agreed[r]} common collectives (rank {r} {whats[0]}): traces of two "
                    "different jobs; give the traces of one job"
                )
