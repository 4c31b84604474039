"""The hosts of a node sweep and their ranks, as the ranks' agreement reported them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Cluster:
    """hosts in order of their lowest rank; ranks[h] the ranks on host h, in rank order."""

    hosts: tuple[str, ...]
    ranks: tuple[tuple[int, ...], ...]

    @classmethod
    def of(cls, rank_hosts: Sequence[str]) -> Cluster:
        """From every rank's host name, by rank."""
        on_host: dict[str, list[int]] = {}
        for rank, host in enumerate(rank_hosts):
            on_host.setdefault(host, []).append(rank)
        return cls(tuple(on_host), tuple(tuple(r) for r in on_host.values()))

    @property
    def local_size(self) -> int:
        return len(self.ranks[0])

    def refusal(self) -> str | None:
        """Why these ranks cannot be swept as host pairs, in one line that says what to do; None if they can."""
        if len(self.hosts) < 2:
            return (
                f"isolate needs ranks on 2 or more hosts, but all {sum(map(len, self.ranks))} run on "
                f"{self.hosts[0]}; launch one node per host (torchrun --nnodes, srun, mpirun), or set "
                "COMMBENCH_HOST per rank (docs/isolate.md)"
            )
        counts = {len(r) for r in self.ranks}
        if len(counts) > 1:
            shown = ", ".join(f"{h}: {len(r)}" for h, r in list(zip(self.hosts, self.ranks))[:8])
            return (
                f"isolate pairs local rank i of one host with local rank i of another, so every host needs as "
                f"many ranks, but the ranks per host are {shown}; start as many ranks on each host"
            )
        return None

    def pair_ranks(self, a: int, b: int) -> list[int]:
        """The ranks of hosts a and b, ordered a0, b0, a1, b1, ...: [a_i, b_i] exchange with each other."""
        return [r for pair in zip(self.ranks[a], self.ranks[b]) for r in pair]

    def host_of(self, rank: int) -> int:
        """The index of the rank's host."""
        return next(h for h, ranks in enumerate(self.ranks) if rank in ranks)

    def local_index(self, rank: int) -> int:
        """The rank's index among its host's ranks (its rail, where each rank has a NIC of its own)."""
        return next(ranks.index(rank) for ranks in self.ranks if rank in ranks)

    def rank_name(self, rank: int) -> str:
        """host:local index, how a rank is named in verdicts."""
        for host, ranks in zip(self.hosts, self.ranks):
            if rank in ranks:
                return f"{host}:{ranks.index(rank)}"
        raise ValueError(f"rank {rank} is on no host")
