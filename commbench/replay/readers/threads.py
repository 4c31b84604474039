"""Which process group a Gloo collective in a Kineto trace ran on, from the thread its annotation ran on.

Gloo's dispatcher ops (`c10d::allreduce_`...) name no process group, nor does their `gloo:*`
annotation; but each ProcessGroupGloo runs its work on run-loop threads of its own (Gloo's default
is 2 a group), created together when the group is made, groups in the order the job made them. So
a rank's run-loop threads, in creation order (their ids, as Linux hands them out), are its groups'
threads group after group: paired, they tell the groups apart, and where every group the rank's
distributedInfo lists shows both its threads, which group each pair is. Point-to-point work runs on
the calling thread (the job's own): those calls keep the group the trace assumes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

THREADS_PER_GROUP = 2  # ProcessGroupGloo.Options' default `threads`

BY_THREADS = (
    "process group told by the Gloo run-loop threads its work ran on ({groups} groups, "
    f"{THREADS_PER_GROUP} threads each in the order the job made them)"
)
UNNAMED = (
    "process groups told apart by the Gloo run-loop threads their work ran on, though not which of the "
    "{listed} groups this rank lists each is (the threads of {unseen} never ran in the trace): named by order, "
    "all over ranks {ranks}"
)


@dataclass(frozen=True)
class Group:
    """A process group as distributedInfo.pg_config lists it."""

    name: str
    desc: str
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class Placement:
    """The group a call ran on, and what telling it assumed."""

    group: Group
    lossy: str


def placements(groups: Sequence[Group], threads: Sequence[Any], caller: Any) -> dict[Any, Placement] | None:
    """Each run-loop thread's group (threads: the annotation thread of each call, caller: the thread
    the job issued them on), or None where nothing can be told: one group listed, the threads' count
    not a whole number of groups, or pairs that would name groups over other ranks by order alone."""
    if len(groups) < 2:
        return None
    seen = sorted({t for t in threads if t is not None and t != caller}, key=_order)
    if not seen or len(seen) % THREADS_PER_GROUP:
        return None
    pairs = [seen[i : i + THREADS_PER_GROUP] for i in range(0, len(seen), THREADS_PER_GROUP)]
    if len(pairs) == len(groups):
        lossy = BY_THREADS.format(groups=len(groups))
        return {t: Placement(g, lossy) for pair, g in zip(pairs, groups) for t in pair}
    if len(pairs) > len(groups) or len({g.ranks for g in groups}) > 1:
        return None
    ranks = groups[0].ranks
    lossy = UNNAMED.format(listed=len(groups), unseen=len(groups) - len(pairs), ranks=list(ranks))
    return {t: Placement(Group(f"threads#{i}", "", ranks), lossy) for i, pair in enumerate(pairs) for t in pair}


def _order(thread: Any) -> tuple[int, str]:
    """Creation order: a thread id as a number where it is one."""
    return (int(thread), "") if isinstance(thread, int) or str(thread).isdigit() else (0, str(thread))
