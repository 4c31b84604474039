"""Repeatability: the same sweep K times back to back, and how far one size's p50 moves between runs.

For each setting, per size, the max/min of the reported p50 across the K runs (1.00 = identical);
then one line per setting, `repeatability: median X, worst Y` over the sizes. The settings are
measured alternately in the same invocation (A B A B ...), so both see the same machine state.
Settings: commbench's defaults (time-budgeted iterations in interleaved rounds) and
`--iters 20 --rounds 1` (a fixed count in one pass, as commbench measured before rounds).

    python bench/repeatability.py [--runs 5] [--op all_gather] [--sizes 8,64,...,16M] [--also "--rounds 5"]

Target on a shared 2-core machine: median <= 1.25, worst <= 2.0 for the defaults.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
SETTINGS = {"defaults": [], "--iters 20 --rounds 1": ["--iters", "20", "--rounds", "1"]}


def sweep(out: Path, common: list[str], extra: list[str]) -> pd.DataFrame:
    cmd = [sys.executable, "-m", "commbench", "sweep", *common, *extra, "-o", str(out), "--no-plot"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env={**os.environ, "CI": "1"})
    if proc.returncode != 0:
        raise SystemExit(f"sweep failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    frame = pd.read_csv(out)
    return frame[frame["status"] == "ok"]


def spreads(runs: list[pd.DataFrame]) -> pd.Series:
    """Per (variant, size): max/min of the p50 across runs."""
    p50 = pd.concat(
        [r.set_index(["variant", "size_bytes"])["time_us_p50"].rename(i) for i, r in enumerate(runs)], axis=1
    )
    return (p50.max(axis=1) / p50.min(axis=1)).sort_index()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--op", default="all_gather")
    parser.add_argument("--variant", default="flat")
    parser.add_argument("--sizes", default="8,64,512,4K,32K,256K,2M,16M")
    parser.add_argument("--also", action="append", default=[], help="another setting to measure, e.g. '--rounds 5'")
    opts = parser.parse_args()
    settings = {**SETTINGS, **{also: also.split() for also in opts.also}}
    common = ["--op", opts.op, "--variant", opts.variant, "--sizes", opts.sizes, "--nproc", "2", "--backend", "gloo"]
    runs: dict[str, list[pd.DataFrame]] = {name: [] for name in settings}
    seconds: dict[str, float] = {name: 0.0 for name in settings}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(opts.runs):
            for i, (name, extra) in enumerate(settings.items()):
                out = Path(tmp) / f"{k}-{i}.csv"
                start = time.monotonic()
                runs[name].append(sweep(out, common, extra))
                seconds[name] += time.monotonic() - start
    print(f"# {opts.op}/{opts.variant} on 2 Gloo ranks at {opts.sizes}, {opts.runs} runs per setting, alternated")
    print("# per size: max/min of the p50 across the runs")
    table = pd.DataFrame({name: spreads(r) for name, r in runs.items()})
    print(f"{'size':>10} " + " ".join(f"{name:>28}" for name in settings))
    for (_variant, size), row in table.iterrows():
        print(f"{size:>10} " + " ".join(f"{row[name]:>28.3f}" for name in settings))
    for name in settings:
        column = table[name]
        print(
            f"repeatability: median {statistics.median(column):.2f}, worst {column.max():.2f}"
            f"  [{name}; {seconds[name] / opts.runs:.1f} s per run]"
        )


if __name__ == "__main__":
    main()
