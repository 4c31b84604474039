"""The GPU check: every NCCL and CUDA path of commbench in one short run on one GPU machine.

Run through bench/gpu-check.sh, which has checked that torch can use the GPU. The steps run in the
order of what they prove (NCCL correctness of every op and variant, then SyncBatchNorm, the timers,
memory, Gloo on CUDA), each within its budget (BUDGETS, at most 5 minutes together: docs/gpu.md),
and each prints its summary line as it ends (passed / failed / the figure). The CSVs, a log of
every command's output and the SyncBatchNorm charts go under $OUT, or a temporary folder. The NCCL
steps run one rank per GPU (NCCL refuses two ranks on one GPU of one host): on a one-GPU machine
their rows measure local copies, which runs every CUDA kernel path but no path between ranks, so
nccl-2rank runs two NCCL ranks on the one GPU as two NCCL hosts (distinct NCCL_HOSTID) talking over
sockets on loopback. Unverified until a device runs it (docs/gpu.md).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shlex
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
# Seconds each step may take, in the order they run; a step that overruns is killed with every
# process it started and fails. The whole check is their sum: at most 5 minutes.
# Sized from what each step starts and computes (docs/gpu.md's table), not yet from a device's
# timings: each step's line prints its time beside its budget, so the first run shows which to move.
BUDGETS = {
    "nccl-ops": 60,  # one pytest, one torchrun rank: every op and variant, 4 dtypes, 8 B to 1 MB
    "nccl-large": 25,  # one sweep rank: every op at 64 MB and 256 MB
    "nccl-2rank": 35,  # one torchrun, 2 NCCL ranks on the one GPU over sockets: every op, 3 small sizes
    "syncbn-cuda": 15,  # in-process kernels against BatchNorm2d, no rank
    "syncbn-nccl": 25,  # one syncbn rank, C = 64 and 1024
    "syncbn-vs-torch": 25,  # one process, 7 pairs at 2 channel counts
    "cuda-tests": 35,  # one pytest, two torchrun launches that each start CUDA ranks
    "timers": 15,  # one process, 3 rounds of 20 iterations
    "memory-cuda": 40,  # 34 cases at 256 MB, each checked against a float64 CPU reference on one thread
    "gloo-cuda": 25,  # 2 CUDA Gloo ranks: every op at 3 sizes, staged through host memory
}
LIMIT_S = sum(BUDGETS.values())
# How long the pipes of a killed step are read for: a process that left the step's tree before the
# kill (an orphan, re-parented away from it) can hold them open for as long as it lives.
DRAIN_S = 5.0
# The 2-rank NCCL step on one GPU: each rank its own NCCL host (NCCL_HOSTID), so NCCL does not refuse
# two ranks on one device; no peer-to-peer or shared-memory transport, the socket one on loopback.
TWO_RANK_ENV = {
    "CUDA_VISIBLE_DEVICES": "0",  # both ranks see the one GPU as their own device 0 (devices.py)
    "NCCL_P2P_DISABLE": "1",
    "NCCL_SHM_DISABLE": "1",
    "NCCL_IB_DISABLE": "1",
    "NCCL_NET": "Socket",
    "NCCL_SOCKET_IFNAME": "lo",
}
NEEDED = ("torch", "pandas", "click", "pytest", "matplotlib")
# Largest relative difference from torch's layer that still counts as the same output and gradients
# (float32, different kernels summing 100K values per channel in different orders).
AGREEMENT = 1e-3


@dataclass
class Finished:
    """A step's command that ran to its end: its exit code and output."""

    returncode: int
    stdout: str
    stderr: str

    def tail(self) -> str:
        lines = (self.stderr.strip() or self.stdout.strip()).splitlines()
        return lines[-1] if lines else "no output"

    def last(self, prefix: str) -> str | None:
        found = [line for line in self.stdout.splitlines() if line.startswith(prefix)]
        return found[-1] if found else None


def descendants(pid: int) -> list[int]:
    """Every process below pid (children first found through /proc), for killing a step's whole tree:
    commbench's ranks run in their own sessions, out of reach of the step's process group."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, queue = [], [pid]
    while queue:
        for child in parents.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


def kill_tree(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the step's process group and every process below it."""
    tree = descendants(proc.pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for pid in tree:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def drain(proc: subprocess.Popen[str]) -> tuple[str, str, str]:
    """What a killed step wrote, read for at most DRAIN_S: (stdout, stderr, a note when a process
    outside the killed tree still held the pipes: what was read by then is kept, the pipes closed)."""
    try:
        stdout, stderr = proc.communicate(timeout=DRAIN_S)
        return stdout, stderr, ""
    except subprocess.TimeoutExpired as exc:
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        proc.wait()
        # The partial output comes as bytes even from a text-mode Popen.
        partial = [
            part.decode(errors="replace") if isinstance(part, bytes) else part or ""
            for part in (exc.output, exc.stderr)
        ]
        note = f"; a process outside its tree held its output open {DRAIN_S:.0f} s after the kill (not waited for)"
        return partial[0], partial[1], note


class Check:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.log = open(out / "gpu-check.log", "w")  # noqa: SIM115 (closed at the end)
        self.lines: list[str] = []
        self.failed = 0
        self.start = time.monotonic()
        self.took_s: dict[str, float] = {}  # each step's wall time, printed beside its budget

    def run(
        self, name: str, command: list[str], cwd: Path = ROOT, env: dict[str, str] | None = None
    ) -> Finished | None:
        """The step's command within its budget (and what is left of the check's); None when it did not end."""
        limit = min(BUDGETS[name], LIMIT_S - (time.monotonic() - self.start))
        if limit < 5:
            self.say(name, "failed", f"not run: the {LIMIT_S} s budget is spent")
            return None
        self.log.write(f"\n### {name}: {shlex.join(command)}\n")
        self.log.flush()
        began = time.monotonic()
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
        try:
            stdout, stderr = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            kill_tree(proc)
            stdout, stderr, orphan = drain(proc)
            self.took_s[name] = time.monotonic() - began
            self.log.write(f"{stdout}{stderr}\n### killed after {limit:.0f} s{orphan}\n")
            self.say(name, "failed", f"timed out after {limit:.0f} s (its budget); killed with its processes{orphan}")
            return None
        self.took_s[name] = time.monotonic() - began
        self.log.write(f"{stdout}{stderr}\n### exit {proc.returncode} after {self.took_s[name]:.1f} s\n")
        self.log.flush()
        return Finished(proc.returncode, stdout, stderr)

    def say(self, name: str, verdict: str, figure: str) -> None:
        """One line per verdict; a step's carries its time beside its budget (blank for derived lines)."""
        self.failed += verdict == "failed"
        took = self.took_s.get(name) if name in BUDGETS else None
        timing = f"{took:5.1f} s of {BUDGETS[name]:3d} s" if took is not None else " " * 16
        line = f"gpu-check: {name:<16} {verdict:<7} {timing}  {figure}"
        self.lines.append(line)
        print(line, flush=True)

    def took(self) -> float:
        return time.monotonic() - self.start


def commbench(*args: str) -> list[str]:
    return [PY, "-m", "commbench", *args]


def pytest_step(check: Check, name: str, *args: str) -> None:
    """A pytest run; its verdict is its exit code, its figure pytest's summary line."""
    proc = check.run(name, [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args])
    if proc is not None:
        summary = (proc.stdout.strip().splitlines() or ["no output"])[-1]
        check.say(name, "passed" if proc.returncode == 0 else "failed", summary)


def rows_verdict(check: Check, name: str, proc: Finished | None, csv: Path) -> Any:
    """Passed when the command exited 0 and no row is wrong; the figure counts the rows by status."""
    if proc is None:
        return None
    if not csv.exists():
        check.say(name, "failed", f"exit {proc.returncode}, no CSV: {proc.tail()}")
        return None
    import pandas as pd

    rows = pd.read_csv(csv)
    counts = rows["status"].value_counts().to_dict()
    figure = f"{counts.get('ok', 0)} ok, {counts.get('wrong', 0)} wrong, {counts.get('unavailable', 0)} unavailable"
    verdict = "passed" if proc.returncode == 0 and not counts.get("wrong") else "failed"
    check.say(name, verdict, f"{figure} rows (exit {proc.returncode})")
    return rows


def syncbn_verdict(check: Check, proc: Finished | None) -> None:
    """Correctness is judged (commbench's layer gives torch's outputs and gradients); the time ratios
    are reported beside their targets but not judged: against cuDNN's fused kernels at small C the
    targets may be out of reach, and one GPU's figure is not a verdict on the arithmetic."""
    if proc is None:
        return
    agreement, ratios = proc.last("syncbn compute: agreement"), proc.last("syncbn compute: worst")
    if proc.returncode != 0 or agreement is None or ratios is None:
        check.say("syncbn-vs-torch", "failed", f"exit {proc.returncode}: {proc.tail()}")
        return
    diff = float(agreement.split()[-1])
    figure = f"max relative difference {diff:.1e} (<= {AGREEMENT:g}); {ratios.removeprefix('syncbn compute: ')}"
    check.say("syncbn-vs-torch", "passed" if diff <= AGREEMENT else "failed", figure)


def two_ranks(command: list[str]) -> list[str]:
    """torchrun of 2 ranks on this host, each running command with its own NCCL_HOSTID (from LOCAL_RANK)."""
    per_rank = 'NCCL_HOSTID="commbench-gpu-check-$LOCAL_RANK" exec "$@"'
    torchrun = (PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "--no-python")
    return [*torchrun, "bash", "-c", per_rank, "two-ranks", *command]


def two_rank_step(check: Check, name: str, out: Path, gpus: int) -> None:
    """Two NCCL ranks on the one GPU (run only there: with more GPUs nccl-ops ran a rank on each)."""
    if gpus != 1:
        check.say(name, "skipped", f"{gpus} GPUs: nccl-ops ran {gpus} ranks, one per GPU")
        return
    csv = out / "sweep-nccl-2rank.csv"
    sweep = commbench("sweep", "--backend", "nccl", "--sizes", "8,64K,1M", "-n", "3", "-w", "1", "--no-plot")
    proc = check.run(name, two_ranks([*sweep, "-o", str(csv)]), env=TWO_RANK_ENV)
    rows = rows_verdict(check, name, proc, csv)
    if rows is not None:
        native = rows[(rows["variant"] == "native_torch") & (rows["status"] == "ok") & (rows["calls"] > 0)]
        two = set(rows["world_size"]) == {2}
        check.say(
            "2rank-sync",
            "passed" if two and len(native) else "failed",
            f"{len(native)} native_torch rows with calls, world sizes {sorted(set(rows['world_size']))}",
        )


def main() -> int:
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if missing:
        print(f"gpu-check: failed: {', '.join(missing)} not importable by {PY}; install them there", flush=True)
        return 1
    import torch

    out = Path(os.environ.get("OUT") or tempfile.mkdtemp(prefix="gpu-check-"))
    out.mkdir(parents=True, exist_ok=True)
    check = Check(out)
    gpus = torch.cuda.device_count()
    check.say(
        "device",
        "passed",
        f"{gpus} x {torch.cuda.get_device_name(0)}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
        f"nccl {'.'.join(map(str, torch.cuda.nccl.version()))}; budget {LIMIT_S} s; results in {out}",
    )

    # 1. NCCL correctness: every op and variant, blocking and non-blocking, float32, float16,
    #    bfloat16 and int64, 8 B to 1 MB, checked (the native SyncBatchNorm layers included).
    pytest_step(check, "nccl-ops", "tests/backends/test_nccl.py", "-k", "every_op")

    # 2. The large sizes, float32, checked: 64 MB and 256 MB named (a -e 256M -f 4 sweep from 8 B stops at 128 MB).
    csv = out / "sweep-nccl.csv"
    proc = check.run(
        "nccl-large",
        commbench(
            "sweep", "--backend", "nccl", "--sizes", "64M,256M", "-n", "3", "-w", "1", "--no-plot", "-o", str(csv)
        ),
    )
    rows = rows_verdict(check, "nccl-large", proc, csv)
    if rows is not None and proc is not None:
        alone = gpus > 1 or "local copy" in (proc.stdout + proc.stderr)
        timers = ", ".join(sorted(set(rows["timer"].dropna())))
        check.say("one-rank-note", "passed" if alone else "failed", f"timer {timers}; one-rank warning shown: {alone}")

    # 2b. On one GPU every step above runs one rank: no ring, send/recv, coalescing across ranks, max
    #     over ranks or torch's own SyncBatchNorm sync. Two NCCL ranks share the GPU as two NCCL
    #     hosts over sockets on loopback: every op, checked (unverified until a device runs it).
    two_rank_step(check, "nccl-2rank", out, gpus)

    # 3. SyncBatchNorm's backward through the CUDA kernels against torch's BatchNorm, every dtype and layout.
    pytest_step(check, "syncbn-cuda", "tests/syncbn/test_syncbn_cuda_contract.py")

    # 4. The syncbn command on nccl, the native torch.nn.SyncBatchNorm included.
    csv = out / "syncbn-nccl.csv"
    proc = check.run(
        "syncbn-nccl", commbench("syncbn", "--backend", "nccl", "--channels", "64,1024", "-n", "5", "-o", str(csv))
    )
    rows = rows_verdict(check, "syncbn-nccl", proc, csv)
    if rows is not None:
        native = rows[(rows["variant"] == "native_torch") & (rows["status"] == "ok")]
        check.say("native_torch", "passed" if len(native) else "failed", f"{len(native)} measured rows")

    # 5. commbench's SyncBatchNorm against torch.nn.SyncBatchNorm on (32, C, 56, 56): agreement, then time ratios.
    syncbn_verdict(
        check,
        check.run(
            "syncbn-vs-torch",
            [
                PY,
                "bench/syncbn_compute.py",
                "--device",
                "cuda",
                "--reference",
                "syncbn",
                "--batch",
                "32",
                "--spatial",
                "56",
                "--channels",
                "64,1024",
                "--pairs",
                "7",
                "--target",
                "1.1",
            ],
        ),
    )

    # 6. The CUDA halves of the timer and device tests: events on the stream, one GPU per rank.
    pytest_step(
        check,
        "cuda-tests",
        "tests/backends/test_nccl.py",
        "-k",
        "not every_op",
        "tests/run/test_timers.py",
        "tests/backends/test_devices.py",
    )

    # 7. CUDA events (with and without the lead-in delay) against synchronise + perf_counter.
    proc = check.run("timers", [PY, "timers.py", "--rounds", "3", "--iters", "20"], cwd=ROOT / "bench")
    if proc is not None:
        ratios = [line for line in proc.stdout.splitlines() if line and not line.startswith("#")]
        check.say("timers", "passed" if proc.returncode == 0 else "failed", " | ".join(ratios[-6:]) or proc.tail())

    # 8. Peak GPU memory per op against its buffers and the memory check's estimate, one rank for all cases.
    proc = check.run(
        "memory-cuda", [PY, "memory.py", "--backend", "nccl", "--ranks", "1", "--size", "256M"], cwd=ROOT / "bench"
    )
    if proc is not None:
        summary = proc.last("# worst peak")
        check.say("memory-cuda", "passed" if proc.returncode == 0 else "failed", summary or proc.tail())

    # 9. Gloo on CUDA tensors, 2 ranks on one GPU: what Gloo stages through host memory runs; the rest
    #    (docs/gpu.md's table) are unavailable rows.
    csv = out / "gloo-cuda.csv"
    proc = check.run(
        "gloo-cuda",
        [
            *commbench("sweep", "--backend", "gloo", "--device", "cuda", "--nproc", "2", "--sizes", "8,64K,4M"),
            "-n",
            "3",
            "-w",
            "1",
            "--no-plot",
            "-o",
            str(csv),
        ],
    )
    rows_verdict(check, "gloo-cuda", proc, csv)

    charts = [p for p in out.glob("*-charts") if p.is_dir()]
    if charts:
        with tarfile.open(out / "charts.tar.gz", "w:gz") as archive:
            for folder in charts:
                archive.add(folder, arcname=folder.name)
        for folder in charts:
            subprocess.run(["rm", "-rf", str(folder)], check=False)
    (out / "summary.txt").write_text("\n".join(check.lines) + "\n")
    check.log.close()
    print(
        f"gpu-check: {len(check.lines) - check.failed} passed, {check.failed} failed in {check.took():.0f} s "
        f"(budget {LIMIT_S} s); details in {out}/gpu-check.log",
        flush=True,
    )
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
