"""A throwaway one-host SLURM cluster for tests: munged, slurmctld and slurmd under a temp folder.

Needs root and Debian's `slurm-wlm` and `munge` (.ci/install-cluster-tools.sh installs them).
Everything lives under one folder: a generated MUNGE key and socket, slurm.conf, state, spool,
pid and log files. The daemons run in the foreground as children of the test, on free loopback
ports, with no cgroups (proctrack/linuxproc, task/none), so nothing touches the host's own
SLURM or MUNGE set-up. stop() cancels the jobs, ends the daemons it started (by pid) and any
slurmstepd they left behind (found by this cluster's SLURM_CONF in their environment).

Manual use, for debugging a failure:
    python -m tests.support.slurm_cluster /tmp/cb-slurm -- srun -N1 -n2 hostname
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "srun", "sinfo", "scancel", "squeue")


class SlurmUnavailable(RuntimeError):
    """The cluster did not come up; the message says which step failed and quotes its logs."""


def missing_tools() -> list[str]:
    return [name for name in DAEMONS if shutil.which(name) is None and not Path("/usr/sbin", name).exists()]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tool(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


SLURM_CONF = """\
ClusterName=commbench
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=5
SchedulerType=sched/builtin
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


class SlurmCluster:
    """One controller and one compute node on this host; use as a context manager or start()/stop()."""

    def __init__(self, root: Path, cpus: int | None = None, host: str | None = None) -> None:
        self.root = Path(root)
        # The node must be named as slurmd sees itself; CPUs must match what the machine reports.
        self.host = host or socket.gethostname().split(".")[0]
        self.cpus = cpus or os.cpu_count() or 1
        self.conf = self.root / "slurm.conf"
        self.munge_socket = self.root / "munge" / "munge.socket.2"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        for key in [
            k for k in self.env if k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_")) and k != "SLURM_CONF"
        ]:
            del self.env[key]  # a test run inside a real allocation must not leak it into this cluster

    # -- lifecycle ------------------------------------------------------------------------------

    def __enter__(self) -> SlurmCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout_s: float = 120.0) -> None:
        """Bring everything up and wait until the node is idle; raises SlurmUnavailable otherwise."""
        try:
            self._start(timeout_s)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for sub in ("munge", "state", "spool"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        os.chmod(self.root / "munge", 0o700)
        key = self.root / "munge" / "munge.key"
        self._run_step("generate a MUNGE key", [_tool("mungekey"), "--create", f"--keyfile={key}", "--force"])
        os.chmod(key, 0o600)
        self._spawn(
            "munged",
            [
                _tool("munged"),
                "--foreground",
                "--force",
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={self.root / 'munge' / 'munged.pid'}",
                f"--log-file={self.root / 'munge' / 'munged.log'}",
                f"--seed-file={self.root / 'munge' / 'munged.seed'}",
            ],
        )
        self._wait("munged's socket", lambda: self.munge_socket.exists(), deadline, "munged")
        self.conf.write_text(
            SLURM_CONF.format(
                host=self.host,
                cpus=self.cpus,
                root=self.root,
                munge_socket=self.munge_socket,
                ctld_port=_free_port(),
                slurmd_port=_free_port(),
            )
        )
        self._spawn("slurmctld", [_tool("slurmctld"), "-D", "-c", "-f", str(self.conf)])
        self._wait("slurmctld to answer", lambda: self._quiet([_tool("sinfo"), "-h"]) == 0, deadline, "slurmctld")
        self._spawn("slurmd", [_tool("slurmd"), "-D", "-f", str(self.conf), "-N", self.host])
        self._wait("the node to be idle", lambda: self._node_state().startswith("idle"), deadline, "slurmd")

    def stop(self) -> None:
        """Cancel jobs, end the daemons this object started and their leftover step daemons; idempotent."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self._quiet([_tool("scancel"), "--full", "--quiet", "-u", "root"], timeout=10)
            end = time.monotonic() + 15
            while time.monotonic() < end and self._capture([_tool("squeue"), "-h"]).strip():
                time.sleep(0.5)
        for name in ("slurmd", "slurmctld", "munged"):  # reverse order of start
            proc = self.procs.pop(name, None)
            if proc is not None:
                _end(proc)
        for pid in self._our_step_daemons():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    # -- use ------------------------------------------------------------------------------------

    def srun(
        self, args: list[str], timeout: float = 300, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [_tool("srun"), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**self.env, **(env or {})},
            cwd=cwd,
        )

    def logs(self) -> str:
        parts = []
        for path in (self.root / "munge" / "munged.log", self.root / "slurmctld.log", self.root / "slurmd.log"):
            if path.exists():
                lines = path.read_text(errors="replace").splitlines()
                parts.append(f"--- {path.name} (last 30 lines)\n" + "\n".join(lines[-30:]))
        return "\n".join(parts)

    # -- helpers --------------------------------------------------------------------------------

    def _spawn(self, name: str, cmd: list[str]) -> None:
        with open(self.root / f"{name}.stdout", "wb") as log:  # the daemon keeps its own copy of the descriptor
            self.procs[name] = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
            )

    def _run_step(self, what: str, cmd: list[str]) -> None:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=self.env, timeout=60)
        if proc.returncode != 0:
            raise SlurmUnavailable(
                f"could not {what}: `{' '.join(cmd)}` exited {proc.returncode}: {proc.stderr.strip()}"
            )

    def _wait(self, what: str, ready: object, deadline: float, daemon: str) -> None:
        while time.monotonic() < deadline:
            if self.procs[daemon].poll() is not None:
                out = (self.root / f"{daemon}.stdout").read_text(errors="replace").strip()
                raise SlurmUnavailable(
                    f"{daemon} exited with {self.procs[daemon].returncode} while waiting for {what}:\n"
                    f"{out[-3000:]}\n{self.logs()}"
                )
            if ready():  # type: ignore[operator]
                return
            time.sleep(0.3)
        raise SlurmUnavailable(f"timed out waiting for {what} (node state {self._node_state()!r}):\n{self.logs()}")

    def _node_state(self) -> str:
        return self._capture([_tool("sinfo"), "-h", "-N", "-o", "%T"]).strip()

    def _quiet(self, cmd: list[str], timeout: float = 10) -> int:
        try:
            return subprocess.run(cmd, capture_output=True, env=self.env, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            return -1

    def _capture(self, cmd: list[str]) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, env=self.env, timeout=10).stdout
        except subprocess.TimeoutExpired:
            return ""

    def _our_step_daemons(self) -> list[int]:
        """slurmstepd processes started by this cluster's slurmd: they carry our SLURM_CONF."""
        marker = f"SLURM_CONF={self.conf}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if not os.readlink(entry / "exe").endswith("slurmstepd"):
                    continue
                if marker in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
        return found


def _end(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":  # python -m tests.support.slurm_cluster ROOT -- CMD...
    root, _, command = sys.argv[1], sys.argv[2], sys.argv[3:]
    started = time.monotonic()
    with SlurmCluster(Path(root)) as cluster:
        print(f"up in {time.monotonic() - started:.1f}s; SLURM_CONF={cluster.conf}", flush=True)
        code = subprocess.call(command, env=cluster.env)
    sys.exit(code)
