"""Host memory one local rank takes before its tensors: the figure behind RANK_RUNTIME_BYTES.

Starts `commbench sweep` with N Gloo ranks on an 8-byte all_gather long enough to be sampled,
and reads each rank's proportional set size (Pss in /proc/<pid>/smaps_rollup: shared library
pages divided among the processes that map them, so the sum over ranks is what they take
together), its RSS, and its peak RSS (VmHWM, which includes importing torch), a few times while
the ranks measure. Reported per rank, and the peak as a ratio to
commbench.run.resources.RANK_RUNTIME_BYTES (the limit holds when the ratio is <= 1).

    python bench/rank_memory.py [--ranks 2 4] [--samples 5]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from commbench.benchkit import RANK_RUNTIME_BYTES


def _kib(pid: int, field: str, table: str = "smaps_rollup") -> int:
    for line in Path(f"/proc/{pid}/{table}").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _ranks(launcher: int) -> list[int]:
    """The pids of the launcher's rank processes."""
    children = Path(f"/proc/{launcher}/task/{launcher}/children").read_text().split()
    return [int(p) for p in children if b"commbench.launch.worker" in Path(f"/proc/{p}/cmdline").read_bytes()]


def measure(ranks: int, samples: int) -> tuple[float, float, float]:
    """(mean PSS, mean RSS, largest peak RSS) per rank in MiB, over `samples` readings while the ranks run."""
    with tempfile.TemporaryDirectory() as folder:
        cmd = [sys.executable, "-m", "commbench", "sweep", "--op", "all_gather", "--variant", "flat", "--sizes", "8"]
        cmd += ["-n", "1000000", "-w", "0", "--no-plot", "--nproc", str(ranks), "--oversubscribe"]
        cmd += ["-o", f"{folder}/m.csv"]
        launcher = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            assert launcher.stdout is not None
            for line in launcher.stdout:  # the table's header: every rank has joined and measures
                if line.startswith("# op"):
                    break
            pss, rss, peak = [], [], 0.0
            for _ in range(samples):
                time.sleep(1.0)
                pids = _ranks(launcher.pid)
                pss.append(sum(_kib(p, "Pss") for p in pids) / len(pids) / 1024)
                rss.append(sum(_kib(p, "Rss") for p in pids) / len(pids) / 1024)
                peak = max(peak, *(_kib(p, "VmHWM", "status") / 1024 for p in pids))
        finally:
            launcher.terminate()
            launcher.wait(timeout=30)
    return sum(pss) / len(pss), sum(rss) / len(rss), peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--samples", type=int, default=5)
    args = parser.parse_args()
    limit = RANK_RUNTIME_BYTES / 2**20
    print(f"{'ranks':>5} {'PSS/rank':>9} {'RSS/rank':>9} {'peak RSS':>9} {'peak RSS / limit':>17}  (MiB)")
    for ranks in args.ranks:
        pss, rss, peak = measure(ranks, args.samples)
        print(f"{ranks:>5} {pss:>9.0f} {rss:>9.0f} {peak:>9.0f} {peak / limit:>17.2f}")


if __name__ == "__main__":
    main()
