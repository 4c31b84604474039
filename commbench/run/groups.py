"""--group: run every op on all ranks (world), within each host (intra) or across hosts (inter).

intra makes one group per host, of the ranks sharing it; inter makes one group per local rank
index, of the i-th rank of every host (ranks of a host in rank order, hosts in order of their
lowest rank). Every group runs the op at once, each on its own data, so a row measures what one
group sees while the others run too, as in a training job with the same split.

The ops run on a view of the backend: its rank, world_size and group are the subgroup's, so S,
busbw and the checks use the group's size. Everything else stays on the world group: the barrier
before each timed sample (all groups start together), reducing the timings and wrong-element
counts of every rank, the agreement and the progress records. The host of each rank is the one
the agreement gathers (Backend.node_info), so hosts, node_ranks and the groups always agree.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from commbench.backends.base import Backend

GROUPS = ("world", "intra", "inter")


def rank_groups(kind: str, hosts: Sequence[str]) -> list[list[int]]:
    """The ranks of each group of this kind; hosts[r] is rank r's host. Hosts must be even (refusal())."""
    if kind == "world":
        return [list(range(len(hosts)))]
    on_host: dict[str, list[int]] = {}
    for rank, host in enumerate(hosts):
        on_host.setdefault(host, []).append(rank)
    per_host = list(on_host.values())
    if kind == "intra":
        return per_host
    if kind == "inter":
        return [list(ranks) for ranks in zip(*per_host)]
    raise ValueError(f"unknown group kind {kind!r}; one of {', '.join(GROUPS)}")


def refusal(kind: str, hosts: Sequence[str]) -> str | None:
    """Why this kind of group cannot be formed over these hosts, or None.

    intra and inter need as many ranks on every host: otherwise groups differ in size, and inter
    would leave some ranks out.
    """
    counts = Counter(hosts)
    if kind == "world" or len(set(counts.values())) == 1:
        return None
    shown = ", ".join(f"{host}: {n}" for host, n in list(counts.items())[:8])
    return (
        f"--group {kind} needs the same number of ranks on every host, but the ranks per host are {shown}; "
        "start as many ranks on each host, or use --group world"
    )


@dataclass(frozen=True)
class Grouping:
    """What the ops run on: backend is the world backend (world, or groups that cannot run) or
    a view of this rank's group; unavailable says why no op can run in these groups."""

    kind: str
    size: int
    backend: Backend
    unavailable: str | None = None


def form_groups(backend: Backend, kind: str, hosts: Sequence[str]) -> Grouping:
    """Every rank calls this with the same hosts (which --group world does not need); it creates
    every group, in one order, on every rank."""
    if kind == "world":
        return Grouping(kind, backend.world_size, backend)
    groups = rank_groups(kind, hosts)
    size = len(groups[0])
    if size == 1:
        why = "every host runs one rank" if kind == "intra" else "every rank is on one host"
        return Grouping(kind, size, backend, f"--group {kind} makes groups of one rank ({why}): nothing to exchange")
    if not backend.torch_process_group:
        return Grouping(
            kind,
            size,
            backend,
            f"--group {kind} needs torch process groups (gloo, nccl); the {backend.name} backend has none",
        )
    import torch.distributed as dist

    # Every rank must create every group, in the same order; torch hands back this rank's own.
    mine, _ = dist.new_subgroups_by_enumeration(groups)
    return Grouping(kind, size, group_view(backend, mine, next(g for g in groups if backend.rank in g)))


def group_view(backend: Backend, group: object, ranks: Sequence[int]) -> Backend:
    """The backend as the ops of one subgroup see it: rank and world size within `ranks` (this
    rank's group); the barrier, result gathering and call counts stay on the world."""
    view = copy.copy(backend)
    # torch numbers a group's ranks in ascending order of their global ranks, whatever order they were given in.
    view.group, view.rank, view.world_size = group, sorted(ranks).index(backend.rank), len(ranks)
    # Bound to the world backend: the call counts stay in one place (the heartbeat publishes them,
    # measure() reads them), and the barrier and result gathering span every group.
    view.record = backend.record  # type: ignore[method-assign]
    view.barrier = backend.barrier  # type: ignore[method-assign]
    view.all_gather_object = backend.all_gather_object  # type: ignore[method-assign]
    view.reduce_floats = backend.reduce_floats  # type: ignore[method-assign]
    view.gather_floats = backend.gather_floats  # type: ignore[method-assign]
    view.gather_object = backend.gather_object  # type: ignore[method-assign]
    return view
