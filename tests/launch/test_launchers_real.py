"""Real launchers end to end: `mpirun` and `srun` start the ranks, commbench joins them.

Each run must write the same rows (op, variant, size, world size) as torchrun does with the same
options. mpirun is Debian's openmpi-bin; srun runs on a one-host SLURM cluster brought up for
the module (tests/support/slurm_cluster.py), which needs root. Everything stays on loopback: Open MPI's
own daemons are held to `lo`, and the cluster's daemons listen on 127.0.0.1.
.ci/install-cluster-tools.sh installs the tools.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.support.distributed import REPO, rendezvous_store, torchrun

pytestmark = pytest.mark.slow

SWEEP = ("sweep", "--op", "all_gather", "--sizes", "8,1K", "-n", "2", "-w", "1", "--no-plot")
_reference: dict[int, list[tuple]] = {}


def rows(path: Path) -> list[tuple]:
    frame = pd.read_csv(path)
    assert (frame.wrong == 0).all() and (frame.status == "ok").all(), frame[["op", "variant", "status", "wrong"]]
    return list(zip(frame.op, frame.variant, frame.size_bytes, frame.world_size))


def torchrun_rows(nproc: int, tmp_path: Path) -> list[tuple]:
    """What torchrun writes for SWEEP on nproc ranks (once per world size per test session)."""
    if nproc not in _reference:
        out = tmp_path / f"torchrun-{nproc}.csv"
        proc = torchrun(nproc, *SWEEP, "-o", str(out), timeout=240)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        _reference[nproc] = rows(out)
    return _reference[nproc]


def assert_same_as_torchrun(
    out: Path, nproc: int, tmp_path: Path, proc: subprocess.CompletedProcess[str]
) -> pd.DataFrame:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert rows(out) == torchrun_rows(nproc, tmp_path)
    frame = pd.read_csv(out)
    host = socket.gethostname()
    assert set(frame.hosts) == {host}
    assert set(frame.node_ranks) == {f"0-{nproc - 1}@{host}/0"}
    return frame


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without launcher variables a developer's shell may carry."""
    prefixes = ("OMPI_", "PMIX_", "PMI_", "SLURM_", "HOROVOD_", "MV2_")
    drop = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK"}
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes) and k not in drop}
    return {**env, **extra}


# -- mpirun --------------------------------------------------------------------------------------------


@pytest.mark.skipif(
    shutil.which("mpirun") is None, reason="mpirun is not installed (bash .ci/install-cluster-tools.sh)"
)
@pytest.mark.parametrize("nproc", [2, 3])
def test_mpirun_writes_the_rows_torchrun_writes(tmp_path, nproc):
    out = tmp_path / "mpirun.csv"
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    # --oversubscribe: 3 ranks on a 2-core runner; oob_tcp_if_include: mpirun's own daemons on loopback only.
    cmd = [
        "mpirun",
        *root,
        "--oversubscribe",
        "--mca",
        "oob_tcp_if_include",
        "lo",
        "-np",
        str(nproc),
        sys.executable,
        "-m",
        "commbench",
        *SWEEP,
        "-o",
        str(out),
    ]
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=REPO, env=_clean_env())
    print(f"mpirun -np {nproc}: {time.monotonic() - started:.1f}s: {' '.join(cmd)}")
    assert_same_as_torchrun(out, nproc, tmp_path, proc)
    assert proc.stdout.count("# done: results in") == 1  # rank 0 alone writes and reports


# -- srun: by hand, then for real ------------------------------------------------------------------------


def _srun_task_env(task: int, ntasks: int, job_id: int, port: int) -> dict[str, str]:
    """What srun -N1 -n{ntasks} sets for one task (as recorded on the test cluster), trimmed."""
    host = socket.gethostname()
    return {
        "SLURM_JOB_ID": str(job_id),
        "SLURM_JOBID": str(job_id),
        "SLURM_STEP_ID": "0",
        "SLURM_STEPID": "0",
        "SLURM_PROCID": str(task),
        "SLURM_LOCALID": str(task),
        "SLURM_NODEID": "0",
        "SLURM_NTASKS": str(ntasks),
        "SLURM_STEP_NUM_TASKS": str(ntasks),
        "SLURM_NNODES": "1",
        "SLURM_STEP_NUM_NODES": "1",
        "SLURM_JOB_NODELIST": host,
        "SLURM_STEP_NODELIST": host,
        "SLURM_STEP_TASKS_PER_NODE": str(ntasks),
        "SLURM_TASKS_PER_NODE": str(ntasks),
        "MASTER_PORT": str(port),
    }


def test_srun_environment_set_by_hand_writes_the_rows_torchrun_writes(tmp_path):
    """No SLURM needed: each task gets the variables srun would give it. The store is hosted here
    (on a port bound before anyone learns it) and the tasks join it as clients, as torchrun's do."""
    out = tmp_path / "srun-by-hand.csv"
    with rendezvous_store() as port:
        tasks = [
            subprocess.Popen(
                [sys.executable, "-m", "commbench", *SWEEP, "-o", str(out)],
                cwd=REPO,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=_clean_env(**_srun_task_env(t, 2, 4242, port), TORCHELASTIC_USE_AGENT_STORE="True"),
            )
            for t in range(2)
        ]
        outputs = [t.communicate(timeout=240) for t in tasks]
    codes = [t.returncode for t in tasks]
    proc = subprocess.CompletedProcess(
        [], max(codes, key=abs), "".join(o for o, _ in outputs), "".join(e for _, e in outputs)
    )
    assert_same_as_torchrun(out, 2, tmp_path, proc)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A one-host SLURM cluster for this module; skipped, with what failed, when it cannot come up."""
    from tests.support.slurm_cluster import SlurmCluster, SlurmUnavailable, missing_tools

    if os.geteuid() != 0:
        pytest.skip("a throwaway SLURM cluster needs root (munged, slurmctld and slurmd run as root)")
    if missing := missing_tools():
        pytest.skip(
            f"SLURM or MUNGE is not installed (missing {', '.join(missing)}; bash .ci/install-cluster-tools.sh)"
        )
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    started = time.monotonic()
    try:
        cluster.start(timeout_s=120)
    except SlurmUnavailable as exc:
        pytest.skip(f"the one-host SLURM cluster did not come up: {exc}")
    print(f"SLURM cluster up in {time.monotonic() - started:.1f}s")
    try:
        yield cluster
    finally:
        cluster.stop()


def test_srun_writes_the_rows_torchrun_writes(slurm, tmp_path):
    out, ntasks = tmp_path / "srun.csv", 2
    # -O (overcommit): never refused for want of CPUs on a small runner, as --oversubscribe does for mpirun.
    args = ["-N1", f"-n{ntasks}", "-O", sys.executable, "-m", "commbench", *SWEEP, "-o", str(out)]
    started = time.monotonic()
    proc = slurm.srun(args, timeout=240, env=_clean_env(SLURM_CONF=str(slurm.conf)), cwd=REPO)
    print(f"srun {' '.join(args)}: {time.monotonic() - started:.1f}s")
    assert_same_as_torchrun(out, ntasks, tmp_path, proc)
    assert proc.stdout.count("# done: results in") == 1


def test_a_batch_script_is_one_process_and_spawns_its_own_ranks(slurm, tmp_path):
    """In sbatch's script SLURM_PROCID and SLURM_NTASKS are set but it is no srun step: commbench spawns."""
    out = tmp_path / "batch.csv"
    script = tmp_path / "job.sh"
    script.write_text(
        f"#!/bin/sh\ncd {REPO}\nexec {sys.executable} -m commbench {' '.join(SWEEP)} --nproc 2 -o {out}\n"
    )
    script.chmod(0o755)
    proc = subprocess.run(
        ["sbatch", "-n2", "-W", "-o", str(tmp_path / "job.out"), str(script)],
        capture_output=True,
        text=True,
        timeout=240,
        env=_clean_env(SLURM_CONF=str(slurm.conf)),
    )
    log = (tmp_path / "job.out").read_text() if (tmp_path / "job.out").exists() else ""
    assert_same_as_torchrun(out, 2, tmp_path, subprocess.CompletedProcess([], proc.returncode, log, proc.stderr))


def test_the_example_batch_script_measures_and_charts_into_a_folder_named_after_the_job(slurm, tmp_path):
    """scripts/slurm/commbench.sbatch as a user submits it, on the test cluster's one node without
    GPUs: its GPU request is left out and gloo replaces nccl through the script's arguments."""
    script = tmp_path / "commbench.sbatch"
    text = (REPO / "scripts" / "slurm" / "commbench.sbatch").read_text()
    script.write_text("".join(line for line in text.splitlines(keepends=True) if "--gpus-per-node" not in line))
    log = tmp_path / "job.out"
    env = _clean_env(
        SLURM_CONF=str(slurm.conf),
        COMMBENCH_RESULTS=str(tmp_path / "results"),
        PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",  # `commbench` as the job finds it
    )
    submit = "sbatch -W -N1 --ntasks-per-node=2 --cpus-per-task=1 -o".split()
    proc = subprocess.run(
        [*submit, str(log), str(script), *SWEEP[1:], "--backend", "gloo"],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=REPO,
    )
    job = proc.stdout.split()[-1] if proc.stdout.startswith("Submitted batch job") else "?"
    out = tmp_path / "results" / f"commbench-{job}" / "sweep.csv"
    output = log.read_text() if log.exists() else ""
    assert_same_as_torchrun(out, 2, tmp_path, subprocess.CompletedProcess([], proc.returncode, output, proc.stderr))
    assert f"2 tasks; results in {out.parent}" in output
    assert sorted(p.name for p in (out.parent / "sweep-charts").iterdir()) == ["all_gather-comm.png"]
