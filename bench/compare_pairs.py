"""Does `commbench compare` cry wolf? Pairs of identical runs back to back, and a planted slowdown.

Each pair is `commbench sweep --op all_gather -b 8 -e 1M -f 4 --raw` twice in a row on 2 Gloo
ranks. A pair is clean when `commbench compare` with its defaults flags no row and no series (no
regression, no improvement) between the two runs. Then the second run of every pair is slowed down 1.5x by
scaling its times (every time column, the per-round p50s and the raw samples; bandwidths divided),
which keeps the machine's real run-to-run noise and plants an exact change; compare must flag it.
Scaling rather than a sleeping op: the change is then exactly 1.5x at every size, and the noise
around it is the real noise of the second run. The planted change is caught when compare fails
(a row or a series called a regression).

    python bench/compare_pairs.py [--pairs 10] [-- extra sweep options]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from commbench.benchkit import (  # noqa: E402
    Comparison,
    compare_runs,
    raw_path,
)

SWEEP = ["--op", "all_gather", "-b", "8", "-e", "1M", "-f", "4", "--raw", "--backend", "gloo", "--nproc", "2"]
FACTOR = 1.5


def sweep(out: Path, extra: list[str]) -> None:
    cmd = [sys.executable, "-m", "commbench", "sweep", *SWEEP, *extra, "-o", str(out), "--overwrite", "--no-plot"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env={**os.environ, "CI": "1"})
    if proc.returncode != 0:
        raise SystemExit(f"sweep failed ({proc.returncode}):\n{proc.stderr[-2000:]}")


def slowed(path: Path, out: Path, factor: float) -> Path:
    """A copy of a run (and its raw samples) with every time multiplied by factor."""
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    for column in frame.columns:
        if column.endswith("_rounds"):  # time_us_p50_rounds, time_us_mean_rounds: one time per round
            frame[column] = [
                ";".join(f"{float(x) * factor:.6g}" for x in cell.split(";")) if cell else cell
                for cell in frame[column]
            ]
        elif column.startswith("time_us_"):
            frame[column] = [f"{float(v) * factor:.6g}" if v else v for v in frame[column]]
        elif column.endswith("_gbps"):
            frame[column] = [f"{float(v) / factor:.6g}" if v else v for v in frame[column]]
    frame.to_csv(out, index=False)
    if raw_path(path).exists():
        raw = pd.read_csv(raw_path(path))
        raw["time_us"] = raw["time_us"] * factor
        raw.to_csv(raw_path(out), index=False)
    return out


def verdicts(baseline: Path, candidate: Path) -> dict[str, int | float | bool]:
    return tally(compare_runs(baseline, candidate))


def tally(result: Comparison) -> dict[str, int | float | bool]:
    """How many rows got each verdict, the largest row change, the series verdicts and whether compare failed."""
    counts: dict[str, int | float | bool] = {}
    for delta in result.deltas:
        counts[delta.verdict] = counts.get(delta.verdict, 0) + 1
    counts["rows"] = len(result.deltas)
    counts["max change %"] = round(max(abs(d.change) for d in result.deltas if d.change == d.change) * 100, 1)
    counts["series"] = len(result.shifts)
    for verdict in ("regression", "improvement"):
        counts[f"series {verdict}"] = result.shift_count(verdict)
    counts["failed"] = result.failed
    return counts


def called(counts: dict[str, int | float | bool]) -> str:
    """What was called changed, e.g. "(1 regression, 1 series improvement)"."""
    keys = ("regression", "improvement", "series regression", "series improvement")
    return "(" + ", ".join(f"{counts[k]} {k}" for k in keys if counts.get(k)) + ")"


def flagged(counts: dict[str, int | float | bool]) -> bool:
    """Any row or series called changed, either way."""
    return any(counts.get(k) for k in ("regression", "improvement", "series regression", "series improvement"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--keep", type=Path, default=None, help="keep the runs' CSVs in this folder")
    parser.add_argument("extra", nargs="*", help="more sweep options (after --), e.g. --iters 20 --rounds 1")
    opts = parser.parse_args()
    clean = caught = 0
    with tempfile.TemporaryDirectory() as scratch:
        tmp = opts.keep or Path(scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        for k in range(opts.pairs):
            a, b = Path(tmp) / f"{k}a.csv", Path(tmp) / f"{k}b.csv"
            sweep(a, opts.extra)
            sweep(b, opts.extra)
            same = verdicts(a, b)
            planted = verdicts(a, slowed(b, Path(tmp) / f"{k}b-slow.csv", FACTOR))
            clean += not flagged(same)
            caught += bool(planted["failed"])
            print(
                f"pair {k + 1:>2}: same command {'FLAGGED ' + called(same) if flagged(same) else 'clean'} "
                f"(largest row change {same['max change %']}%); planted {FACTOR}x: compare "
                f"{'FAILED (caught)' if planted['failed'] else 'passed (missed)'}, "
                f"{planted.get('regression', 0)}/{planted['rows']} rows and "
                f"{planted['series regression']}/{planted['series']} series flagged as regressions",
                flush=True,
            )
    print(f"# sweep {' '.join(SWEEP + opts.extra)}; compare with its defaults")
    print(
        f"compare pairs: {clean}/{opts.pairs} identical pairs clean; planted {FACTOR}x caught "
        f"(compare fails) in {caught}/{opts.pairs} pairs"
    )


if __name__ == "__main__":
    main()
