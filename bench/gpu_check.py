"""The GPU check: every NCCL and CUDA path of commbench in one short run on one GPU machine.

Run through bench/gpu-check.sh. Each check prints one summary line (passed / failed / the figure);
the CSVs, a log of every command's output and the charts (one archive) go under $OUT, or a
temporary folder. World size is 1 per GPU (NCCL refuses two ranks on one GPU): the nccl rows of a
one-GPU machine measure local copies, which still runs and verifies every CUDA code path.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
LIMIT_S = 8 * 60  # the whole check; each step gets what is left, at most its own limit


class Check:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.log = open(out / "gpu-check.log", "w")  # noqa: SIM115 (closed at the end)
        self.lines: list[str] = []
        self.failed = 0
        self.start = time.monotonic()

    def run(
        self, name: str, command: list[str], limit_s: float, cwd: Path = ROOT
    ) -> subprocess.CompletedProcess[str] | None:
        left = LIMIT_S - (time.monotonic() - self.start)
        if left < 20:
            self.say(name, "failed", "no time left in the 8-minute budget")
            return None
        self.log.write(f"\n### {name}: {shlex.join(command)}\n")
        self.log.flush()
        try:
            proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=min(limit_s, left))
        except subprocess.TimeoutExpired as exc:
            self.log.write(str(exc.stdout or "") + str(exc.stderr or ""))
            self.say(name, "failed", f"timed out after {min(limit_s, left):.0f} s")
            return None
        self.log.write(proc.stdout + proc.stderr + f"\n### exit {proc.returncode}\n")
        self.log.flush()
        return proc

    def say(self, name: str, verdict: str, figure: str) -> None:
        self.failed += verdict == "failed"
        line = f"gpu-check: {name:<16} {verdict:<7} {figure}"
        self.lines.append(line)
        print(line, flush=True)


def commbench(*args: str) -> list[str]:
    return [PY, "-m", "commbench", *args]


def rows_verdict(
    check: Check, name: str, proc: subprocess.CompletedProcess[str] | None, csv: Path
) -> pd.DataFrame | None:
    if proc is None:
        return None
    if not csv.exists():
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        check.say(name, "failed", f"exit {proc.returncode}, no CSV: {tail}")
        return None
    rows = pd.read_csv(csv)
    counts = rows["status"].value_counts().to_dict()
    figure = (
        f"{counts.get('ok', 0)} ok, {counts.get('wrong', 0)} wrong, {counts.get('unavailable', 0)} unavailable rows"
    )
    verdict = "passed" if proc.returncode == 0 and not counts.get("wrong") else "failed"
    check.say(name, verdict, f"{figure} (exit {proc.returncode})")
    return rows


def last_line(proc: subprocess.CompletedProcess[str] | None, prefix: str) -> str | None:
    if proc is None:
        return None
    found = [line for line in proc.stdout.splitlines() if line.startswith(prefix)]
    return found[-1] if found else None


def main() -> int:
    import torch

    out = Path(os.environ.get("OUT") or subprocess.check_output(["mktemp", "-d"], text=True).strip())
    out.mkdir(parents=True, exist_ok=True)
    check = Check(out)
    gpus = torch.cuda.device_count()
    check.say(
        "device",
        "passed",
        f"{gpus} x {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
        f"nccl {'.'.join(map(str, torch.cuda.nccl.version()))}; results in {out}",
    )

    # 1. The CUDA tests: every op and variant on nccl, the timers, the device rule.
    proc = check.run(
        "pytest-cuda",
        [
            PY,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_nccl.py",
            "tests/test_timers.py",
            "tests/test_devices.py",
        ],
        240,
    )
    if proc is not None:
        tail = (proc.stdout.strip().splitlines() or ["no output"])[-1]
        check.say("pytest-cuda", "passed" if proc.returncode == 0 else "failed", tail)

    # 2. Every op and variant on nccl, 8 B to 256 MB, checked; the one-rank warning.
    csv = out / "sweep-nccl.csv"
    proc = check.run(
        "sweep-nccl",
        commbench(
            "sweep",
            "--backend",
            "nccl",
            "-b",
            "8",
            "-e",
            "256M",
            "-f",
            "4",
            "--rounds",
            "1",
            "--time-per-size",
            "0.005",
            "-o",
            str(csv),
        ),
        150,
    )
    rows = rows_verdict(check, "sweep-nccl", proc, csv)
    if rows is not None:
        timers = ", ".join(sorted(set(rows["timer"].dropna())))
        alone = gpus > 1 or "local copy" in (proc.stdout + proc.stderr)
        check.say("one-rank-note", "passed" if alone else "failed", f"timer {timers}; one-rank warning shown: {alone}")

    # 3. SyncBN on nccl, the native layers included.
    csv = out / "syncbn-nccl.csv"
    proc = check.run("syncbn-nccl", commbench("syncbn", "--backend", "nccl", "--rounds", "1", "-o", str(csv)), 90)
    rows = rows_verdict(check, "syncbn-nccl", proc, csv)
    if rows is not None:
        native = rows[(rows["variant"] == "native_torch") & (rows["status"] == "ok")]
        check.say("native_torch", "passed" if len(native) else "failed", f"{len(native)} measured rows")

    # 4. commbench's SyncBatchNorm arithmetic against torch.nn.SyncBatchNorm, (32, C, 56, 56).
    proc = check.run(
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
            "--pairs",
            "9",
            "--target",
            "1.1",
        ],
        120,
    )
    worst, agree = last_line(proc, "syncbn compute: worst"), last_line(proc, "# outputs and gradients agree")
    if proc is not None:
        ok = proc.returncode == 0 and worst is not None and float(worst.split()[-1]) <= 1.1
        check.say("syncbn-vs-torch", "passed" if ok else "failed", f"{worst} (target <= 1.1); {agree}")

    # 5. CUDA events against synchronise + perf_counter, all_reduce at 5 sizes.
    proc = check.run("timers", [PY, "timers.py", "--rounds", "5", "--iters", "30"], 60, cwd=ROOT / "bench")
    if proc is not None:
        ratios = [line for line in proc.stdout.splitlines() if line and not line.startswith("#")]
        check.say("timers", "passed" if proc.returncode == 0 else "failed", " | ".join(ratios[-6:]))

    # 6. Peak GPU memory per op against its buffers and the guard's estimate.
    proc = check.run(
        "memory-cuda", [PY, "memory.py", "--backend", "nccl", "--ranks", "1", "--size", "1G"], 90, cwd=ROOT / "bench"
    )
    summary = last_line(proc, "# worst peak")
    if proc is not None:
        check.say("memory-cuda", "passed" if proc.returncode == 0 else "failed", summary or "no summary")

    # 7. Gloo on CUDA tensors, 2 ranks on one GPU: what Gloo supports there, unavailable rows for the rest.
    csv = out / "gloo-cuda.csv"
    proc = check.run(
        "gloo-cuda",
        commbench(
            "sweep",
            "--backend",
            "gloo",
            "--device",
            "cuda",
            "--nproc",
            "2",
            "--sizes",
            "8,64K,4M",
            "--rounds",
            "1",
            "--no-plot",
            "-o",
            str(csv),
        ),
        120,
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
    print(f"gpu-check: {len(check.lines) - check.failed} passed, {check.failed} failed; details in {out}/gpu-check.log")
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
