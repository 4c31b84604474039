"""Can any gate meet "19 of 20 identical runs clean, a 1.2x slowdown caught in 9 of 10" on this machine?

Reads the runs a `bench/compare_history.py --keep DIR` folder holds and measures the between-run
drift the gate has to see through: for each run and series (variant), the mean over sizes of the log
fastest round (the gate's statistic) against the median of the `last` runs before it. Then, for a
range of fixed thresholds T on that deviation, the best any series rule could do (regressions only:
a run is clean when no series rose by more than T; a planted 1.2x is caught when some series, its
natural deviation plus log 1.2, rose by more than T). When no T gives both targets, no threshold on
this statistic can: the runs themselves drift too much.

    python bench/history_drift.py DIR [--last 5] [--planted 10]
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

import pandas as pd

from commbench.benchkit import robust_sd

FACTOR = 1.2


def series_deviations(runs: list[Path]) -> list[dict[str, float]]:
    """Per run, per variant: the mean over sizes of the log fastest round, each size centred on its
    median over all runs (the centring cancels when runs are compared with each other)."""
    logs: list[dict[tuple[str, int], float]] = []
    for path in runs:
        frame = pd.read_csv(path, keep_default_na=False)
        logs.append(
            {
                (row.variant, int(row.size_bytes)): math.log(
                    min(float(x) for x in str(row.time_us_p50_rounds).split(";"))
                )
                for row in frame.itertuples()
                if row.status == "ok" and row.time_us_p50_rounds
            }
        )
    keys = sorted(set.intersection(*(set(found) for found in logs)))
    centre = {key: statistics.median(found[key] for found in logs) for key in keys}
    variants = sorted({variant for variant, _ in keys})
    return [{v: statistics.fmean(found[k] - centre[k] for k in keys if k[0] == v) for v in variants} for found in logs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--last", type=int, default=5)
    parser.add_argument("--planted", type=int, default=10)
    opts = parser.parse_args()
    # A pool of bench/compare_history.py (launchNNN.csv, in the order collected), or its older runs (rNN.csv).
    runs = sorted(opts.folder.glob("launch[0-9][0-9][0-9].csv")) or sorted(opts.folder.glob("r[0-9][0-9].csv"))
    series = series_deviations(runs)
    deviations = [
        {v: run[v] - statistics.median(before[v] for before in series[k - opts.last : k]) for v in run}
        for k, run in enumerate(series)
        if k >= opts.last
    ]
    every = [d for run in deviations for d in run.values()]
    spread = robust_sd(every)
    print(f"# {len(runs)} runs in {opts.folder}; series deviation from the median of the {opts.last} runs before")
    print(f"robust sd {spread:.3f} (log), largest rise {max(every):.3f}, largest fall {min(every):.3f}")
    shift = math.log(FACTOR)
    for threshold in (0.06, 0.08, 0.10, 0.12, 0.14, 0.16, 0.18, 0.20, 0.25):
        clean = sum(max(run.values()) <= threshold for run in deviations)
        caught = sum(max(run.values()) + shift > threshold for run in deviations[: opts.planted])
        print(
            f"T {threshold:.2f}: {clean}/{len(deviations)} clean, planted {FACTOR}x caught "
            f"{caught}/{min(opts.planted, len(deviations))}"
        )


if __name__ == "__main__":
    main()
