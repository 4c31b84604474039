"""Launch: one process's place in a job and where its ranks meet, as every rank receives it.

commbench/launch/env.py reads it from the environment (detect()) in the process that starts;
each backend receives it in `init()`, and the rank's sweep reads its rank, host and rendezvous
from it. It lives here, below every layer that receives it, so none of them imports the launchers.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field

from commbench.errors import UserError

# The host name a rank reports (hosts, node_ranks, --group) instead of its real one: a test hook
# that makes ranks on one machine count as several hosts.
HOST_ENV = "COMMBENCH_HOST"
KINDS = ("torchrun", "horovodrun", "slurm", "openmpi", "mpich", "mvapich", "local")


@dataclass(frozen=True)
class Launch:
    """One process's place in a job, and where its ranks meet.

    kind is "local" (started by a user: commbench spawns the ranks) or the launcher that started
    this rank (KINDS); ranks commbench spawned get torchrun's variables and read as "torchrun".
    local_rank, local_world_size and node_rank are None when the launcher does not say (node_rank under a
    multi-host mpirun, or without torchrun's GROUP_RANK); master_addr and master_port are None
    where no torch rendezvous applies (local, horovodrun).
    """

    kind: str
    rank: int = 0
    world_size: int = 1
    local_rank: int | None = 0  # None where the launcher does not say (RANK and WORLD_SIZE set by hand)
    local_world_size: int | None = None
    node_rank: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    spawned: bool = False  # started by commbench's own spawner
    attempt: int = 0  # torchrun's restart count: keys in a store it keeps across restarts are per attempt
    host: str = field(default_factory=socket.gethostname)  # as the rank reports it: HOST_ENV, if set, says

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown launcher kind {self.kind!r}; one of {', '.join(KINDS)}")
        if not 0 <= self.rank < self.world_size:
            raise UserError(f"{self.kind} says rank {self.rank} of {self.world_size}: not a valid rank")

    @property
    def is_rank(self) -> bool:
        """True inside one rank of a job; False in a process that still has to start the ranks."""
        return self.kind != "local"


LOCAL = Launch("local")
