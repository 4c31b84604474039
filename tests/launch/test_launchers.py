"""Launcher detection from the environment each launcher really sets, and SLURM's node lists.

The environments below are the variables each launcher sets for a rank (the Open MPI and SLURM
ones copied from real runs of Debian's openmpi-bin 4.1 and slurm-wlm 22.05), trimmed to the ones
that matter. Addresses are host names only; nothing here opens a socket.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

import pytest

from commbench.backends.job import LOCAL, Launch
from commbench.errors import UserError
from commbench.launch.env import DEFAULT_PORT, derived_port, detect, export_torch_env, torch_env
from commbench.launch.slurm import expand_nodelist, parse_nodelist, tasks_on_node
from tests.support.errors import assert_one_line_error

TORCHRUN = {
    "RANK": "3",
    "WORLD_SIZE": "4",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
    "GROUP_RANK": "1",
    "MASTER_ADDR": "node01",
    "MASTER_PORT": "29400",
    "TORCHELASTIC_RUN_ID": "none",
}
# Task 3 of `srun -N2 -n4` in job 4242, on the second of the step's two nodes.
SRUN = {
    "SLURM_JOB_ID": "4242",
    "SLURM_JOBID": "4242",
    "SLURM_STEP_ID": "0",
    "SLURM_STEPID": "0",
    "SLURM_PROCID": "3",
    "SLURM_NTASKS": "4",
    "SLURM_STEP_NUM_TASKS": "4",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1",
    "SLURM_NNODES": "2",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_JOB_NODELIST": "gpu[01-02,07]",
    "SLURM_STEP_NODELIST": "gpu[02,07]",
    "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
    "SLURM_TASKS_PER_NODE": "2(x2),1",
}
# Task 1 of `srun -N1 -n2` (as seen on the one-host test cluster).
SRUN_ONE_NODE = {
    "SLURM_JOB_ID": "7",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "1",
    "SLURM_NTASKS": "2",
    "SLURM_STEP_NUM_TASKS": "2",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "0",
    "SLURM_NNODES": "1",
    "SLURM_STEP_NUM_NODES": "1",
    "SLURM_JOB_NODELIST": "vm",
    "SLURM_STEP_NODELIST": "vm",
    "SLURM_STEP_TASKS_PER_NODE": "2",
    "SLURM_CONF": "/nonexistent/slurm.conf",
}
# Rank 1 of `mpirun -np 2` on one host.
OMPI = {
    "OMPI_COMM_WORLD_RANK": "1",
    "OMPI_COMM_WORLD_SIZE": "2",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    "OMPI_COMM_WORLD_NODE_RANK": "1",
    "OMPI_MCA_ess_base_jobid": "2077949953",
    "PMIX_NAMESPACE": "2077949953",
    "PMIX_RANK": "1",
}
# Rank 5 of `mpirun -np 8 --host a:4,b:4`: 4 ranks per host, rank 5 is the second on host b.
OMPI_TWO_HOSTS = {
    **OMPI,
    "OMPI_COMM_WORLD_RANK": "5",
    "OMPI_COMM_WORLD_SIZE": "8",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
    "OMPI_COMM_WORLD_NODE_RANK": "1",
    "PMIX_RANK": "5",
}
HYDRA = {"PMI_RANK": "2", "PMI_SIZE": "3", "PMI_FD": "5", "MPI_LOCALRANKID": "2", "MPI_LOCALNRANKS": "3"}
MVAPICH = {
    "MV2_COMM_WORLD_RANK": "4",
    "MV2_COMM_WORLD_SIZE": "8",
    "MV2_COMM_WORLD_LOCAL_RANK": "0",
    "MV2_COMM_WORLD_LOCAL_SIZE": "4",
}
HOROVODRUN = {
    "HOROVOD_RANK": "2",
    "HOROVOD_SIZE": "4",
    "HOROVOD_LOCAL_RANK": "0",
    "HOROVOD_LOCAL_SIZE": "2",
    "HOROVOD_CROSS_RANK": "1",
    "HOROVOD_CONTROLLER": "gloo",
    "HOROVOD_GLOO_RENDEZVOUS_ADDR": "node01",
}

SRUN_PORT = 19726  # derived_port("4242.0"): job 4242, step 0
OMPI_PORT = 27878  # derived_port("2077949953"): the PMIx namespace every rank of that mpirun shares

DETECTED = [
    ("nothing", {}, {}, LOCAL),
    ("torchrun", TORCHRUN, {}, Launch("torchrun", 3, 4, 1, 2, 1, "node01", 29400)),
    (
        "srun torchrun: torchrun's variables win",
        {**SRUN, **TORCHRUN},
        {},
        Launch("torchrun", 3, 4, 1, 2, 1, "node01", 29400),
    ),
    (
        "mpirun torchrun: torchrun's variables win",
        {**OMPI, **TORCHRUN},
        {},
        Launch("torchrun", 3, 4, 1, 2, 1, "node01", 29400),
    ),
    # RANK and WORLD_SIZE set by hand: the local rank is the launcher's, never the global rank.
    (
        "RANK and WORLD_SIZE by hand under srun: SLURM_LOCALID",
        {**SRUN, "RANK": "3", "WORLD_SIZE": "4", "MASTER_ADDR": "gpu02", "MASTER_PORT": "29500"},
        {},
        Launch("torchrun", 3, 4, 1, None, None, "gpu02", 29500),
    ),
    (
        "RANK and WORLD_SIZE by hand under mpirun: Open MPI's local rank",
        {**OMPI_TWO_HOSTS, "RANK": "5", "WORLD_SIZE": "8", "MASTER_ADDR": "a", "MASTER_PORT": "29500"},
        {},
        Launch("torchrun", 5, 8, 1, None, None, "a", 29500),
    ),
    (
        "RANK and WORLD_SIZE by hand, all on this host",
        {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "h", "MASTER_PORT": "29500"},
        {},
        Launch("torchrun", 2, 4, 2, 4, None, "h", 29500),
    ),
    (
        "RANK and WORLD_SIZE by hand, hosts unknown: no local rank",
        {"RANK": "6", "WORLD_SIZE": "8", "MASTER_ADDR": "h", "MASTER_PORT": "29500"},
        {},
        Launch("torchrun", 6, 8, None, None, None, "h", 29500),
    ),
    ("horovodrun", HOROVODRUN, {}, Launch("horovodrun", 2, 4, 0, 2, 1)),
    (
        "mpirun under Horovod's MPI controller",
        {**OMPI, "HOROVOD_CONTROLLER": "mpi"},
        {},
        Launch("horovodrun", 1, 2, 1, 2, 0),
    ),
    ("srun over two nodes: the step's first node", SRUN, {}, Launch("slurm", 3, 4, 1, 2, 1, "gpu02", SRUN_PORT)),
    ("srun on one node: loopback", SRUN_ONE_NODE, {}, Launch("slurm", 1, 2, 1, 2, 0, "127.0.0.1", derived_port("7.0"))),
    (
        "srun with MASTER_ADDR / MASTER_PORT set",
        {**SRUN, "MASTER_ADDR": "login1", "MASTER_PORT": "4000"},
        {},
        Launch("slurm", 3, 4, 1, 2, 1, "login1", 4000),
    ),
    (
        "srun: the options beat the environment",
        {**SRUN, "MASTER_ADDR": "login1", "MASTER_PORT": "4000"},
        {"master_addr": "ib-gpu02", "master_port": 5000},
        Launch("slurm", 3, 4, 1, 2, 1, "ib-gpu02", 5000),
    ),
    (
        "srun with SLURM_NTASKS only (older SLURM)",
        {k: v for k, v in SRUN.items() if k != "SLURM_STEP_NUM_TASKS"},
        {},
        Launch("slurm", 3, 4, 1, 2, 1, "gpu02", SRUN_PORT),
    ),
    (
        "srun --mpi=pmi2 also sets PMI_RANK: still SLURM",
        {**SRUN, "PMI_RANK": "3", "PMI_SIZE": "4", "PMI_FD": "7"},
        {},
        Launch("slurm", 3, 4, 1, 2, 1, "gpu02", SRUN_PORT),
    ),
    (
        "srun --mpi=pmix also sets PMIX_RANK: still SLURM",
        {**SRUN, "PMIX_RANK": "3", "PMIX_NAMESPACE": "slurm.pmix.4242.0"},
        {},
        Launch("slurm", 3, 4, 1, 2, 1, "gpu02", SRUN_PORT),
    ),
    # A batch script (seen for real: PROCID=0 and NTASKS, no STEP_ID), an salloc shell, one-task steps.
    (
        "sbatch's batch script is one process",
        {
            "SLURM_JOB_ID": "1",
            "SLURM_PROCID": "0",
            "SLURM_NTASKS": "2",
            "SLURM_LOCALID": "0",
            "SLURM_NODEID": "0",
            "SLURM_JOB_NODELIST": "vm",
        },
        {},
        LOCAL,
    ),
    (
        "an salloc shell is one process",
        {"SLURM_JOB_ID": "2", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "vm"},
        {},
        LOCAL,
    ),
    (
        "a one-task step (srun --pty bash) spawns",
        {**SRUN_ONE_NODE, "SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_STEP_NUM_TASKS": "1"},
        {},
        LOCAL,
    ),
    ("SLURM's batch step id is not an srun step", {**SRUN, "SLURM_STEP_ID": "4294967294"}, {}, LOCAL),
    (
        "mpirun on one host: loopback, port from the job",
        OMPI,
        {},
        Launch("openmpi", 1, 2, 1, 2, 0, "127.0.0.1", OMPI_PORT),
    ),
    (
        "mpirun over two hosts with --master-addr",
        OMPI_TWO_HOSTS,
        {"master_addr": "hostA"},
        Launch("openmpi", 5, 8, 1, 4, None, "hostA", OMPI_PORT),
    ),
    (
        "mpirun over two hosts with MASTER_ADDR",
        {**OMPI_TWO_HOSTS, "MASTER_ADDR": "hostA"},
        {},
        Launch("openmpi", 5, 8, 1, 4, None, "hostA", OMPI_PORT),
    ),
    # mpirun inside an allocation starts its daemons with srun: the ranks see that step's SLURM variables.
    (
        "mpirun inside sbatch: Open MPI's variables win",
        {**SRUN, **OMPI},
        {},
        Launch("openmpi", 1, 2, 1, 2, 0, "127.0.0.1", OMPI_PORT),
    ),
    ("MPICH / Intel MPI Hydra on one host", HYDRA, {}, Launch("mpich", 2, 3, 2, 3, 0, "127.0.0.1", DEFAULT_PORT)),
    ("Hydra with --master-port", HYDRA, {"master_port": 31000}, Launch("mpich", 2, 3, 2, 3, 0, "127.0.0.1", 31000)),
    (
        "MVAPICH2 over two hosts with MASTER_ADDR",
        {**MVAPICH, "MASTER_ADDR": "hostA"},
        {},
        Launch("mvapich", 4, 8, 0, 4, None, "hostA", DEFAULT_PORT),
    ),
]


@pytest.mark.parametrize("name, env, options, expected", DETECTED, ids=[row[0] for row in DETECTED])
def test_detect(name, env, options, expected):
    assert detect(env, scontrol=False, **options) == expected


REFUSED = [
    (
        "mpirun over two hosts without an address",
        OMPI_TWO_HOSTS,
        {},
        "under openmpi, its ranks span several hosts and rank 0's host is unknown: pass --master-addr HOST "
        "(an address of rank 0's host that every rank can reach) or set MASTER_ADDR",
    ),
    (
        "MVAPICH2 without a local size or address",
        {k: v for k, v in MVAPICH.items() if k != "MV2_COMM_WORLD_LOCAL_SIZE"},
        {},
        "under mvapich, mvapich does not say whether its ranks share one host and rank 0's host is unknown: pass --master-addr HOST",
    ),
    (
        "PMI_RANK from a launcher commbench does not know",
        {"PMI_RANK": "0", "PMI_SIZE": "2"},
        {},
        "PMI_RANK is set but MPI_LOCALRANKID is not",
    ),
    (
        "--master-addr under torchrun",
        TORCHRUN,
        {"master_addr": "x"},
        "--master-addr applies under srun or mpirun only; under torchrun, give torchrun its own --master-addr instead",
    ),
    (
        "--master-port without a launcher",
        {},
        {"master_port": 1234},
        "--master-port applies under srun or mpirun only; the local ranks commbench starts always meet on 127.0.0.1, so leave it out",
    ),
    (
        "a rank outside the world",
        {**OMPI, "OMPI_COMM_WORLD_RANK": "2"},
        {},
        "openmpi says rank 2 of 2: not a valid rank",
    ),
    ("a rank that is not a number", {**SRUN, "SLURM_PROCID": "x"}, {}, "SLURM_PROCID='x' is not a whole number"),
]


@pytest.mark.parametrize("name, env, options, message", REFUSED, ids=[row[0] for row in REFUSED])
def test_launches_commbench_cannot_place_are_one_line_errors(name, env, options, message):
    with pytest.raises(UserError) as caught:
        detect(env, scontrol=False, **options)
    text = caught.value.format_message()
    assert text.startswith(message) and "\n" not in text


def test_the_master_port_is_derived_from_the_job_and_stays_in_range():
    assert derived_port("4242.0") == SRUN_PORT and derived_port("2077949953") == OMPI_PORT
    ports = {derived_port(f"{job}.0") for job in range(1000, 3000)}
    assert min(ports) >= 15000 and max(ports) < 35000
    assert len(ports) > 1800  # consecutive job ids spread out rather than sharing a handful of ports
    assert derived_port("4242.0") != derived_port("4242.1")  # two steps of one job running at once


# -- torch's env:// variables ------------------------------------------------------------------------


def test_torch_env_for_a_multi_node_srun_task():
    launch = detect(SRUN, scontrol=False)
    assert torch_env(launch, {}) == {
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "1",
        "MASTER_ADDR": "gpu02",
        "MASTER_PORT": str(SRUN_PORT),
        "OMP_NUM_THREADS": "1",
    }


def test_torch_env_on_one_host_binds_gloo_and_nccl_to_loopback_unless_the_user_chose():
    launch = detect(OMPI)
    env = torch_env(launch, {})
    assert env["MASTER_ADDR"] == "127.0.0.1" and env["GLOO_SOCKET_IFNAME"] == "lo" and env["NCCL_SOCKET_IFNAME"] == "lo"
    chosen = torch_env(launch, {"GLOO_SOCKET_IFNAME": "eth1", "OMP_NUM_THREADS": "4"})
    assert (
        "GLOO_SOCKET_IFNAME" not in chosen and "OMP_NUM_THREADS" not in chosen and chosen["NCCL_SOCKET_IFNAME"] == "lo"
    )


def test_torch_env_leaves_out_what_the_launcher_does_not_say():
    env = torch_env(detect(OMPI_TWO_HOSTS, master_addr="hostA"), {})
    assert "GROUP_RANK" not in env and env["LOCAL_WORLD_SIZE"] == "4" and "GLOO_SOCKET_IFNAME" not in env


def test_torch_env_round_trips_through_detection():
    """The variables written for an srun task read back as the same rank under the torchrun rules."""
    launch = detect(SRUN, scontrol=False)
    again = detect({**SRUN, **torch_env(launch, {})}, scontrol=False)
    assert (
        again.kind,
        again.rank,
        again.world_size,
        again.local_rank,
        again.local_world_size,
        again.node_rank,
        again.master_addr,
        again.master_port,
    ) == ("torchrun", 3, 4, 1, 2, 1, "gpu02", SRUN_PORT)


def test_export_torch_env_updates_the_given_environment_and_local_has_no_rendezvous():
    env = dict(OMPI)
    written = export_torch_env(detect(env), env)
    assert env["RANK"] == "1" and env["WORLD_SIZE"] == "2" and written["MASTER_PORT"] == str(OMPI_PORT)
    with pytest.raises(ValueError, match="no torch rendezvous"):
        torch_env(LOCAL, {})


# -- SLURM's node lists and task counts --------------------------------------------------------------

NODELISTS = [
    ("a", ["a"]),
    ("a,b", ["a", "b"]),
    ("n[1-3]", ["n1", "n2", "n3"]),
    ("n[01-03,7]", ["n01", "n02", "n03", "n7"]),
    ("r1n[1-2],r2n3", ["r1n1", "r1n2", "r2n3"]),
    ("gpu[01-04,07]", ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"]),
    ("n[9-11]", ["n9", "n10", "n11"]),
    ("n[08-10]", ["n08", "n09", "n10"]),
    ("n[001-3]", ["n001", "n002", "n003"]),
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
    ("a,,b", ["a", "b"]),
    ("node-1.cluster,gpu[2,4]", ["node-1.cluster", "gpu2", "gpu4"]),
]


@pytest.mark.parametrize("nodelist, hosts", NODELISTS, ids=[row[0] for row in NODELISTS])
def test_parse_nodelist(nodelist, hosts):
    assert parse_nodelist(nodelist) == hosts
    assert expand_nodelist(nodelist, scontrol=False) == hosts


@pytest.mark.parametrize("nodelist", ["n[1-", "n]", "n[a-b]", "n[3-1]", "n[1-3", "n[]"])
def test_parse_nodelist_refuses_what_it_cannot_read(nodelist):
    with pytest.raises(ValueError, match="SLURM node list"):
        parse_nodelist(nodelist)


STUB_CONF = "ClusterName=stub\nSlurmctldHost=localhost\nNodeName=localhost CPUs=1\nPartitionName=p Nodes=localhost\n"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("scontrol") is None, reason="scontrol is not installed (slurm-client)")
@pytest.mark.parametrize("nodelist, hosts", NODELISTS, ids=[row[0] for row in NODELISTS])
def test_the_parser_agrees_with_scontrol(tmp_path, nodelist, hosts):
    """scontrol is the reference: with a configuration at hand (a stub is enough) it expands locally."""
    conf = tmp_path / "slurm.conf"
    conf.write_text(STUB_CONF)
    env = {"SLURM_CONF": str(conf)}
    reference = subprocess.run(
        ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30, env=env
    ).stdout.split()
    assert reference == hosts
    assert expand_nodelist(nodelist, environ=env) == hosts


def test_without_a_slurm_configuration_scontrol_is_not_asked(monkeypatch, tmp_path):
    """Without one, scontrol would look it up in DNS and fail: the parser answers instead."""
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: calls.append(a))
    monkeypatch.setattr("commbench.launch.slurm.SLURM_CONF_FILES", (str(tmp_path / "absent.conf"),))
    assert expand_nodelist("n[1-2]", environ={}) == ["n1", "n2"] and calls == []


@pytest.mark.parametrize("spec, counts", [("2", [2]), ("2(x3),1", [2, 2, 2, 1]), ("4,2(x2)", [4, 2, 2])])
def test_tasks_on_node(spec, counts):
    assert [tasks_on_node(spec, node) for node in range(len(counts))] == counts
    with pytest.raises(ValueError):
        tasks_on_node(spec, len(counts))


# -- the CLI under a launcher (no rank starts: each refusal comes first) -----------------------------


def _sweep(monkeypatch, env: dict[str, str], args: str) -> Any:
    """`commbench sweep` in this process under env, as a launcher's rank would run it."""
    from click.testing import CliRunner

    from commbench.cli import main

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return CliRunner().invoke(
        main, [*"sweep --backend gloo --op all_gather --sizes 8 --no-plot".split(), *args.split()]
    )


def _cli_error(monkeypatch, env: dict[str, str], args: str) -> str:
    result = _sweep(monkeypatch, env, args)
    assert_one_line_error(result, exit_code=2)
    line = result.output.strip()
    assert line.startswith("commbench: error: "), line
    return line.removeprefix("commbench: error: ")


def test_nproc_under_srun_or_mpirun_is_refused(monkeypatch):
    assert _cli_error(monkeypatch, SRUN_ONE_NODE, "--nproc 2") == (
        "--nproc is for spawning local ranks; under slurm use srun -n / --ntasks instead"
    )
    monkeypatch.delenv("SLURM_PROCID")
    assert "under openmpi use mpirun -np instead" in _cli_error(monkeypatch, OMPI, "--nproc 2")


def test_master_addr_without_srun_or_mpirun_is_refused(monkeypatch):
    assert _cli_error(monkeypatch, {}, "--master-addr hostA --master-port 1234") == (
        "--master-addr and --master-port apply under srun or mpirun only; "
        "the local ranks commbench starts always meet on 127.0.0.1, so leave them out"
    )


def test_multi_host_mpirun_without_an_address_says_which_option_to_set(monkeypatch):
    assert "pass --master-addr HOST" in _cli_error(monkeypatch, OMPI_TWO_HOSTS, "")


def test_under_mpirun_the_rank_gets_torchs_variables_and_the_options(monkeypatch):
    """The sweep command hands the rank torch's env:// variables, with --master-addr / --master-port applied."""
    import commbench.launch.worker
    from commbench.run.config import Outcome

    seen: list[tuple[dict[str, str], Launch]] = []
    monkeypatch.setattr(
        commbench.launch.worker, "run_worker", lambda cfg, launch: seen.append((dict(os.environ), launch)) or Outcome(0)
    )
    saved = dict(os.environ)
    try:
        env = {**OMPI_TWO_HOSTS, "OMP_NUM_THREADS": "1"}
        result = _sweep(monkeypatch, env, "--master-addr hostA --master-port 31234")
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert result.exit_code == 0, result.output
    ((env, launch),) = seen
    assert (launch.kind, launch.rank, launch.world_size, launch.master_addr) == ("openmpi", 5, 8, "hostA")
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == ("5", "8", "1", "4")
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("hostA", "31234") and "GROUP_RANK" not in env
