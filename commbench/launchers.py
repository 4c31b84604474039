"""How this process was started: by a launcher as one rank of a job, or by a user (then commbench
spawns its own ranks). Torch-free, read from the environment only.

The answer is a `Launch`, computed once and handed down: the launch module acts on it, and each
backend receives it in `init()`, so no backend reads launcher variables or imports the launcher.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

# Set by commbench's spawner in every rank it starts (the configuration itself goes in on stdin).
LAUNCHER_PID_ENV = "COMMBENCH_LAUNCHER_PID"
# Set by horovodrun (Gloo) for each slot, and by mpirun under Horovod's MPI controller.
HOROVODRUN_ENV = ("HOROVOD_RANK", "HOROVOD_SIZE")
MPI_RANK_ENV = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")

HOROVOD_LAUNCH_HINT = (
    "--backend horovod needs ranks started by horovodrun or by commbench itself, not torchrun: use "
    "`horovodrun -np N --gloo commbench sweep --backend horovod ...` or `commbench sweep --backend horovod --nproc N`"
)


@dataclass(frozen=True)
class Launch:
    """One process's place in a job.

    kind is "local" (started by a user: commbench spawns the ranks), "torchrun" (torchrun, or a rank
    commbench spawned, which gets torchrun's variables) or "horovodrun" (a Horovod job).
    """

    kind: str
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int | None = None
    node_rank: int = 0
    master_addr: str | None = None
    master_port: int | None = None
    spawned: bool = False  # started by commbench's own spawner
    attempt: int = 0  # torchrun's restart count: keys in a store it keeps across restarts are per attempt

    @property
    def is_rank(self) -> bool:
        """True inside one rank of a job; False in a process that still has to start the ranks."""
        return self.kind != "local"


def _int(env: Mapping[str, str], *names: str, default: int = 0) -> int:
    for name in names:
        if env.get(name, "").strip().lstrip("-").isdigit():
            return int(env[name])
    return default


def launched_by_horovodrun(env: Mapping[str, str] | None = None) -> bool:
    """A rank started by horovodrun, mpirun under Horovod, or commbench's Horovod spawner."""
    env = os.environ if env is None else env
    return all(k in env for k in HOROVODRUN_ENV) or (
        "HOROVOD_CONTROLLER" in env and any(k in env for k in MPI_RANK_ENV)
    )


def detect(env: Mapping[str, str] | None = None) -> Launch:
    """This process's Launch, from its environment."""
    env = os.environ if env is None else env
    spawned = LAUNCHER_PID_ENV in env
    master = {
        "master_addr": env.get("MASTER_ADDR") or None,
        "master_port": _int(env, "MASTER_PORT") or None,
    }
    if launched_by_horovodrun(env):
        return Launch(
            "horovodrun",
            rank=_int(env, "HOROVOD_RANK", *MPI_RANK_ENV),
            world_size=_int(env, "HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", default=1),
            local_rank=_int(env, "HOROVOD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"),
            local_world_size=_int(env, "HOROVOD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE") or None,
            node_rank=_int(env, "HOROVOD_CROSS_RANK"),
            spawned=spawned,
            **master,
        )
    if "RANK" in env and "WORLD_SIZE" in env:
        rank = _int(env, "RANK")
        return Launch(
            "torchrun",
            rank=rank,
            world_size=_int(env, "WORLD_SIZE", default=1),
            local_rank=_int(env, "LOCAL_RANK", default=rank),
            local_world_size=_int(env, "LOCAL_WORLD_SIZE") or None,
            node_rank=_int(env, "GROUP_RANK", "NODE_RANK"),
            spawned=spawned,
            attempt=_int(env, "TORCHELASTIC_RESTART_COUNT"),
            **master,
        )
    return Launch("local")
