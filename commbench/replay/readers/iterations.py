"""A Flight Recorder dump cut into the job's iterations. A dump is a ring buffer of what the job
issued, set-up, every iteration and the job's end alike, and no entry marks an iteration: `record_id`
counts over every group, `collective_seq_id` and `op_id` per group, and the gaps in `time_created_ns`
within an iteration are as long as those between two. What repeats does: a training loop issues one
sequence of calls again and again. The longest run of one sequence repeated, keyed by op, group,
dtype and element counts (and, in a pickled dump, the Python stack each call was issued from), is
taken as the iterations; what comes before it (set-up; the first iterations, which issue another
sequence: DDP's bucket rebuild) and after it (the job's final barrier) is left out and said so. The
stacks also tell set-up from the loop: the frame where an entry's stack leaves the one every entry
shares is the loop's call for an iteration's entries, another line for set-up and the end."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from commbench.replay.record import Collective

MAX_PERIOD = 4096  # calls per iteration looked for: a longer iteration is not cut (the dump is replayed whole)
SHARE = 3  # the iterations must cover a third of the dump at least
Frame = tuple[str, str, int | None]  # (filename, function, line)
Stack = tuple[Frame, ...]  # outermost frame first


@dataclass(frozen=True)
class Run:
    """`copies` iterations of `period` entries each, from entry `start`."""

    start: int
    period: int
    copies: int

    @property
    def end(self) -> int:
        return self.start + self.period * self.copies

    def iteration(self, i: int) -> int | None:
        """Entry i's iteration, from 1; None outside the run."""
        return (i - self.start) // self.period + 1 if self.start <= i < self.end else None


def longest_repeat(keys: Sequence[Hashable], least: int = 0, most: int = MAX_PERIOD) -> Run | None:
    """The run of one sequence repeated back to back at least twice that covers the most entries (the
    shortest sequence on a tie), None where no run covers more than `least` entries. Where entries follow the run, its
    iterations end where it ends (what follows a loop fixes where its last iteration ended; the
    first copy may begin mid-way, a ring buffer having cut it); where the dump ends inside the run (a
    dump on a timeout, mid-iteration), they begin where it begins. O(entries x periods), vectorised."""
    index: dict[Hashable, int] = {}
    codes = np.fromiter((index.setdefault(k, len(index)) for k in keys), dtype=np.int64, count=len(keys))
    n, best, covered = len(codes), None, least
    for period in range(1, min(n // 2, most) + 1):
        same = codes[:-period] == codes[period:]  # entry i repeats entry i + period
        repeats = int(same.sum())
        if not repeats or repeats + period <= covered:  # no run of this period can cover more
            continue
        edges = np.diff(np.concatenate(([0], same.view(np.int8), [0])))
        starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
        k = int(np.argmax(stops - starts))
        span = int(stops[k] - starts[k]) + period  # entries starts[k] .. + span are periodic
        copies = span // period
        if copies < 2 or copies * period <= covered:
            continue
        start = int(starts[k])
        if start + span < n:
            start += span - copies * period
        best, covered = Run(start, period, copies), copies * period
    return best


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _call_sites(stacks: Sequence[Stack]) -> list[Frame | None]:
    """Each entry's frame just below the frames every entry's stack shares (outermost first): the
    line that issued it in the one function they all run through (the loop's call, set-up's, the end's)."""
    shared = 0
    while all(len(s) > shared and s[shared] == stacks[0][shared] for s in stacks):
        shared += 1
    return [s[shared] if len(s) > shared else None for s in stacks]


def _left_out(entries: Sequence[Collective], run: Run, stacks: Sequence[Stack] | None) -> str:
    """What of the dump is outside the iterations, said in a few words."""
    before, after = range(run.start), range(run.end, len(entries))
    tail = [entries[i] for i in after]
    final = " (the final barrier)" if len(tail) == 1 and tail[0].name == "barrier" else ""
    if stacks is None:
        parts = [
            f"{_plural(len(before), 'entry', 'entries')} before them (set-up, or iterations that issue another sequence)"
        ]
        parts += [f"{_plural(len(tail), 'entry', 'entries')} after them{final}"]
        return "; ".join(p for p in parts if not p.startswith("0 "))
    sites = _call_sites(stacks)
    loop = {sites[i] for i in range(run.start, run.end)}
    setup = sum(sites[i] not in loop for i in before)
    earlier, later = len(before) - setup, sum(sites[i] in loop for i in after)
    parts = [
        _plural(setup, "set-up entry", "set-up entries"),
        f"{_plural(earlier, 'entry', 'entries')} of the loop's first iterations, which issue another sequence",
        f"{_plural(later, 'entry', 'entries')} of the loop after them, another sequence",
        f"{_plural(len(tail) - later, 'entry', 'entries')} after the loop{final}",
    ]
    return "; ".join(p for p in parts if not p.startswith("0 "))


@dataclass(frozen=True)
class Iterations:
    """A dump's entries placed in iterations, and the one line that says how (or that it could not)."""

    steps: tuple[int | None, ...]  # each entry's iteration from 1, None outside them
    count: int  # iterations found, 0 where none
    line: str


def _covered(run: Run | None) -> int:
    return 0 if run is None else run.copies * run.period


def iterations(entries: Sequence[Collective], stacks: Sequence[Stack] | None) -> Iterations:
    """The dump's iterations: the longest repeated run by op, group, dtype and counts (with the
    stacks where the dump has them), or by op, group, dtype and stack where that covers more (an
    MoE's counts change each iteration; its calls' stacks do not). The run must cover a third of the
    dump (SHARE) at least, else none is taken: a pair of like calls in set-up is no loop."""
    n = len(entries)
    least = -(-n // SHARE) - 1  # a run must cover more than this
    stack = [(s,) for s in stacks] if stacks else [()] * n
    run = longest_repeat(
        [(c.name, c.group, c.dtype, c.in_elems, c.out_elems, *stack[i]) for i, c in enumerate(entries)], least
    )
    how = "op, group, dtype, element counts" + (" and Python stack" if stacks else "")
    if stacks:
        unsized = longest_repeat([(c.name, c.group, c.dtype, *stack[i]) for i, c in enumerate(entries)], least)
        if _covered(unsized) > _covered(run):
            run, how = unsized, "op, group, dtype and Python stack; their element counts change from one to the next"
    if run is None:
        repeats = longest_repeat([(c.name, c.group, c.dtype) for c in entries], least) is not None
        why = (
            "its calls repeat by op and group, but their element counts change from one iteration to the next, "
            "as an MoE's all_to_alls do"
            if repeats
            else "no sequence of its calls repeats"
        )
        line = (
            f"a Flight Recorder dump with no iterations found ({why}): its {_plural(n, 'entry', 'entries')}, "
            "set-up and the job's end included, are replayed as one sequence"
        )
        return Iterations((None,) * n, 0, line)
    line = (
        f"a Flight Recorder dump: {run.copies} iterations of {_plural(run.period, 'call', 'calls')} found by their "
        f"repeating sequence ({how}); left out: {_left_out(entries, run, stacks) or 'nothing'}"
    )
    return Iterations(tuple(run.iteration(i) for i in range(n)), run.copies, line)
