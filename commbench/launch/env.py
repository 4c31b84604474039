"""Who started this process, read from its environment only (torch-free): a launcher, which made
it one rank of a job, or a user, and then commbench spawns its own ranks.

detect() computes a `Launch` once and it is handed down: launch/start.py acts on it, and each
backend receives it in `init()`, so no backend reads launcher variables. torch_env() turns a Launch
into the variables torch.distributed's env:// rendezvous reads (the ones torchrun sets), so the
torch backends work the same under srun and mpirun as under torchrun.

The first launcher that matches wins: horovodrun, torchrun, the MPI launchers, SLURM, else local.
docs/launchers.md has the variables each is recognised by, which SLURM processes count as srun
tasks, and where the ranks meet. SLURM's compressed lists are read by commbench/launch/slurm.py; the Launch type itself lives in
commbench/backends/job.py, below every layer that receives it.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import zlib
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

from commbench.backends.job import HOST_ENV, LOCAL, Launch
from commbench.errors import UserError
from commbench.launch.slurm import expand_nodelist, tasks_on_node

# Set by commbench's spawner in every rank it starts (the configuration itself goes in on stdin).
LAUNCHER_PID_ENV = "COMMBENCH_LAUNCHER_PID"
# What joins hosts in the hosts column (a;b) and ranks in node_ranks (0@a/0;1@b/1).
HOST_SEPARATORS = ";@/"

MPI_KINDS = ("openmpi", "mpich", "mvapich")
# Launchers whose ranks commbench turns into torch's env:// variables itself (export_torch_env).
TORCH_ENV_KINDS = ("slurm", *MPI_KINDS)
DEFAULT_PORT = 29500  # torch's and torchrun's default
PORT_BASE, PORT_SPAN = 15000, 20000  # derived ports: 15000-34999, below Linux's ephemeral range (32768+ mostly unused)
LOOPBACK = "127.0.0.1"
# Set by horovodrun (Gloo) for each slot.
HOROVODRUN_ENV = ("HOROVOD_RANK", "HOROVOD_SIZE")
# Set by the MPI launchers that run their own daemons; any of these means mpirun/mpiexec started us.
MPI_RANK_ENV = ("OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
# A rank's index on its host, by launcher: torchrun's, then SLURM's, Open MPI's, MVAPICH2's, Hydra's.
LOCAL_RANK_ENV = (
    "LOCAL_RANK",
    "SLURM_LOCALID",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MV2_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
)
# Shared by every rank of one Open MPI / PMIx job and different between jobs: seeds the port.
MPI_JOB_ID_ENV = ("PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid")

# How to set the number of ranks under each launcher, for the refusal of --nproc there.
RANK_COUNT_OPTION = {
    "torchrun": "--nproc_per_node",
    "horovodrun": "-np",
    "slurm": "srun -n / --ntasks",
    "openmpi": "mpirun -np",
    "mpich": "mpiexec -n",
    "mvapich": "mpirun -np",
}


@dataclass(frozen=True)
class LaunchOptions:
    """What a measuring command is told about starting its ranks: --nproc (None: the backend's
    default), --oversubscribe, and --master-addr / --master-port (under srun and mpirun only)."""

    nproc: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    oversubscribe: bool = False

    def __post_init__(self) -> None:
        if self.nproc is not None and self.nproc < 1:
            raise UserError(f"--nproc must be at least 1 (got {self.nproc})")


def launched_by_horovodrun(env: Mapping[str, str] | None = None) -> bool:
    """A rank started by horovodrun, mpirun under Horovod, or commbench's Horovod spawner."""
    env = os.environ if env is None else env
    return _has(env, *HOROVODRUN_ENV) or ("HOROVOD_CONTROLLER" in env and any(k in env for k in MPI_RANK_ENV))


def detect(
    env: Mapping[str, str] | None = None,
    *,
    master_addr: str | None = None,
    master_port: int | None = None,
    scontrol: bool = True,
) -> Launch:
    """This process's Launch, from its environment (the rules: docs/launchers.md).

    master_addr / master_port are the --master-addr / --master-port options; they apply under
    srun and mpirun only. scontrol=False expands SLURM node lists without `scontrol`.
    """
    env = os.environ if env is None else env
    launch = _detect(env, master_addr, master_port, scontrol)
    given = [
        flag for flag, value in (("--master-addr", master_addr), ("--master-port", master_port)) if value is not None
    ]
    if given and launch.kind not in TORCH_ENV_KINDS:
        what = " and ".join(given)
        instead = {
            "torchrun": f"under torchrun, give torchrun its own {what} instead",
            "horovodrun": "under horovodrun, give horovodrun its own rendezvous options instead",
            "local": f"the local ranks commbench starts always meet on 127.0.0.1, so leave {'it' if len(given) == 1 else 'them'} out",
        }[launch.kind]
        raise UserError(f"{what} {'applies' if len(given) == 1 else 'apply'} under srun or mpirun only; {instead}")
    check_host_override(env)
    return dataclasses.replace(launch, host=env[HOST_ENV]) if env.get(HOST_ENV) else launch


def check_host_override(env: Mapping[str, str]) -> None:
    """Refuse a COMMBENCH_HOST holding the separators of the CSV's hosts and node_ranks columns
    (`a;b` as a host would read as two hosts, and node_ranks as `rank@host/node`)."""
    host = env.get(HOST_ENV)
    if host is not None and (bad := sorted(set(host) & set(HOST_SEPARATORS))):
        raise UserError(
            f"{HOST_ENV}={host!r} holds {', '.join(map(repr, bad))}: the CSV's hosts and node_ranks columns "
            f"use {' '.join(HOST_SEPARATORS)} as separators; choose a host name without them"
        )


def _detect(env: Mapping[str, str], master_addr: str | None, master_port: int | None, scontrol: bool) -> Launch:
    spawned = LAUNCHER_PID_ENV in env
    if launched_by_horovodrun(env):
        master = {"master_addr": env.get("MASTER_ADDR") or None, "master_port": _opt_int(env, "MASTER_PORT")}
        if _has(env, *HOROVODRUN_ENV):
            return Launch(
                "horovodrun",
                _int(env, "HOROVOD_RANK"),
                _int(env, "HOROVOD_SIZE"),
                _int(env, "HOROVOD_LOCAL_RANK", 0),
                _opt_int(env, "HOROVOD_LOCAL_SIZE"),
                _opt_int(env, "HOROVOD_CROSS_RANK"),
                spawned=spawned,
                **master,
            )
        mpi = _detect_mpi(env, None, None, need_address=False)
        if mpi is not None:
            return Launch(
                "horovodrun", mpi.rank, mpi.world_size, mpi.local_rank, mpi.local_world_size, mpi.node_rank, **master
            )
    if _has(env, "RANK", "WORLD_SIZE"):
        return Launch(
            "torchrun",
            _int(env, "RANK"),
            _int(env, "WORLD_SIZE"),
            _local_rank(env),
            _opt_int(env, "LOCAL_WORLD_SIZE"),
            _opt_int(env, "GROUP_RANK"),
            env.get("MASTER_ADDR") or None,
            _opt_int(env, "MASTER_PORT"),
            spawned=spawned,
            attempt=_int(env, "TORCHELASTIC_RESTART_COUNT", 0),
        )
    # MPI before SLURM: mpirun inside an allocation starts its daemons with srun, so its ranks
    # inherit SLURM_PROCID and SLURM_NTASKS of that one-daemon-per-node step, not their own.
    mpi = _detect_mpi(env, master_addr, master_port, need_address=True)
    if mpi is not None:
        return mpi
    if _is_srun_task(env):
        return _detect_slurm(env, master_addr, master_port, scontrol)
    return LOCAL


def _local_rank(env: Mapping[str, str]) -> int | None:
    """A torchrun-style rank's index on its host: LOCAL_RANK, else the local rank of the launcher
    under which RANK and WORLD_SIZE were set by hand (srun, mpirun), else the rank itself when every
    rank is on this host. Never the global rank otherwise: on a host of a multi-host job it is no
    GPU index, so None (the GPU backends then ask for LOCAL_RANK)."""
    for key in LOCAL_RANK_ENV:
        if env.get(key):
            return _int(env, key)
    world_size = _int(env, "WORLD_SIZE")
    if world_size == 1 or _opt_int(env, "LOCAL_WORLD_SIZE") == world_size:
        return _int(env, "RANK")
    return None


def _detect_mpi(
    env: Mapping[str, str], master_addr: str | None, master_port: int | None, need_address: bool
) -> Launch | None:
    if _has(env, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
        # OMPI_COMM_WORLD_NODE_RANK is the rank among this node's processes, not the node's index.
        kind, rank, size = "openmpi", _int(env, "OMPI_COMM_WORLD_RANK"), _int(env, "OMPI_COMM_WORLD_SIZE")
        local_rank, local_size = _int(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0), _opt_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE")
    elif _has(env, "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"):
        kind, rank, size = "mvapich", _int(env, "MV2_COMM_WORLD_RANK"), _int(env, "MV2_COMM_WORLD_SIZE")
        local_rank, local_size = _int(env, "MV2_COMM_WORLD_LOCAL_RANK", 0), _opt_int(env, "MV2_COMM_WORLD_LOCAL_SIZE")
    elif _has(env, "PMI_RANK", "PMI_SIZE"):
        if "MPI_LOCALRANKID" not in env:
            if "SLURM_STEP_ID" in env:
                return None  # `srun --mpi=pmi2` sets PMI_RANK too; SLURM's variables say more
            raise UserError(
                "PMI_RANK is set but MPI_LOCALRANKID is not, so commbench cannot tell this launcher's local "
                "ranks; set RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT for each rank instead"
            )
        kind, rank, size = "mpich", _int(env, "PMI_RANK"), _int(env, "PMI_SIZE")
        local_rank, local_size = _int(env, "MPI_LOCALRANKID"), _opt_int(env, "MPI_LOCALNRANKS")
    else:
        return None
    single_host = local_size == size
    addr = master_addr or env.get("MASTER_ADDR") or (LOOPBACK if single_host else None)
    if addr is None and need_address:
        why = (
            "its ranks span several hosts"
            if local_size is not None
            else f"{kind} does not say whether its ranks share one host"
        )
        raise UserError(
            f"under {kind}, {why} and rank 0's host is unknown: pass --master-addr HOST "
            "(an address of rank 0's host that every rank can reach) or set MASTER_ADDR"
        )
    port = master_port or _opt_int(env, "MASTER_PORT") or _mpi_port(env)
    return Launch(kind, rank, size, local_rank, local_size, 0 if single_host else None, addr, port)


def _mpi_port(env: Mapping[str, str]) -> int:
    for key in MPI_JOB_ID_ENV:
        if env.get(key):
            return derived_port(env[key])
    return DEFAULT_PORT


def _is_srun_task(env: Mapping[str, str]) -> bool:
    """A task of an srun step with more than one task. A batch script (no SLURM_STEP_ID), an salloc
    shell and a one-task step (`srun --pty bash`) are one process: commbench spawns the ranks there."""
    tasks = "SLURM_STEP_NUM_TASKS" if env.get("SLURM_STEP_NUM_TASKS") else "SLURM_NTASKS"
    if "SLURM_PROCID" not in env or tasks not in env or "SLURM_STEP_ID" not in env:
        return False
    # SLURM's reserved step ids (batch 4294967294, extern 4294967295, interactive ...) are not srun steps.
    if _int(env, "SLURM_STEP_ID") >= 0xFFFFFFF0:
        return False
    return _int(env, tasks) > 1


def _detect_slurm(env: Mapping[str, str], master_addr: str | None, master_port: int | None, scontrol: bool) -> Launch:
    size = _opt_int(env, "SLURM_STEP_NUM_TASKS") or _int(env, "SLURM_NTASKS")
    node = _int(env, "SLURM_NODEID", 0)
    per_node = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
    local_size = tasks_on_node(per_node, node) if per_node else None
    # The step's nodes, not the job's: a step may use a subset, and its rank 0 is on its first node.
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    addr = master_addr or env.get("MASTER_ADDR")
    if addr is None:
        nodes = _opt_int(env, "SLURM_STEP_NUM_NODES") or _opt_int(env, "SLURM_NNODES")
        if nodes == 1 or local_size == size:
            addr = LOOPBACK
        elif nodelist:
            addr = expand_nodelist(nodelist, scontrol=scontrol, environ=env)[0]
        else:
            raise UserError(
                "under srun, SLURM_STEP_NODELIST and SLURM_JOB_NODELIST are both missing: pass --master-addr HOST"
            )
    port = master_port or _opt_int(env, "MASTER_PORT")
    if port is None:
        job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
        port = derived_port(f"{job}.{env['SLURM_STEP_ID']}") if job else DEFAULT_PORT
    return Launch("slurm", _int(env, "SLURM_PROCID"), size, _int(env, "SLURM_LOCALID", 0), local_size, node, addr, port)


def derived_port(job_id: str) -> int:
    """A port in 15000-34999 from an id every rank of a job shares: same id, same port, on every host.

    A hash (CRC-32) rather than `id % span`: consecutive or regularly spaced job ids running on
    one node at once would otherwise collide in patterns; any two jobs clash with odds 1 in 20000.
    """
    return PORT_BASE + zlib.crc32(job_id.encode()) % PORT_SPAN


def torch_env(launch: Launch, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The torch.distributed env:// variables (as torchrun sets them) for a rank of this launch.

    RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT always; LOCAL_WORLD_SIZE and GROUP_RANK
    when the launcher says. Besides, it defaults what torchrun or commbench's spawner would:
    OMP_NUM_THREADS=1 when ranks share a host (torchrun's rule), and Gloo / NCCL bound to loopback
    when every rank is on this host. A variable the user already set is kept.
    """
    if launch.master_addr is None or launch.master_port is None:
        raise ValueError(f"a {launch.kind} launch has no torch rendezvous address")
    env = os.environ if environ is None else environ
    out = {
        "RANK": str(launch.rank),
        "WORLD_SIZE": str(launch.world_size),
        "MASTER_ADDR": launch.master_addr,
        "MASTER_PORT": str(launch.master_port),
    }
    if launch.local_rank is not None:
        out["LOCAL_RANK"] = str(launch.local_rank)
    if launch.local_world_size is not None:
        out["LOCAL_WORLD_SIZE"] = str(launch.local_world_size)
    if launch.node_rank is not None:
        out["GROUP_RANK"] = str(launch.node_rank)
    defaults: dict[str, str] = {}
    if launch.local_world_size != 1:
        defaults["OMP_NUM_THREADS"] = "1"
    if launch.master_addr == LOOPBACK:
        defaults.update(GLOO_SOCKET_IFNAME="lo", NCCL_SOCKET_IFNAME="lo")
    out.update({k: v for k, v in defaults.items() if k not in env})
    return out


def export_torch_env(launch: Launch, environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Put torch_env(launch) into this process's environment before its rank starts; returns it.

    torch is never imported here, but when it already is, OMP_NUM_THREADS is also applied through
    torch.set_num_threads: the OpenMP runtime read the variable when torch was loaded.
    """
    env = os.environ if environ is None else environ
    values = torch_env(launch, env)
    env.update(values)
    torch = sys.modules.get("torch")
    if "OMP_NUM_THREADS" in values and torch is not None:
        torch.set_num_threads(int(values["OMP_NUM_THREADS"]))
    return values


# -- small readers ----------------------------------------------------------------------------------


def _has(env: Mapping[str, str], *keys: str) -> bool:
    return all(k in env for k in keys)


def _int(env: Mapping[str, str], key: str, default: int | None = None) -> int:
    value = env.get(key)
    if value is None:
        if default is None:
            raise UserError(f"{key} is not set")
        return default
    try:
        return int(value)
    except ValueError:
        raise UserError(f"{key}={value!r} is not a whole number") from None


def _opt_int(env: Mapping[str, str], key: str) -> int | None:
    return _int(env, key) if env.get(key) else None
