"""Does the history gate reach a 1.2x slowdown with repeated launches, and is its stated resolution true?

Collect a pool of independent launches of one sweep once (`--keep DIR`: each launch a new
`commbench sweep` process, with new ranks and a new rendezvous, as `sweep --repeat` launches them;
the pool stays in DIR, and a collection cut short resumes where it stopped), then judge from it
without sweeping again (`--reuse DIR`):

- a trial draws, at random from the pool (seeded), H launches as the history and K others as the
  candidate group: disjoint within a trial, resampled across trials (trials share launches, so
  they are not independent draws of the machine; a larger pool makes them closer to it). The
  history is filed in a fresh history; the group is one CSV of K launches (launch, launch_group
  columns), as `sweep --repeat K` writes it, judged by `compare --history --last H`;
- a planted slowdown scales every time of the candidate's rows (its own noise kept), as
  bench/compare_pairs.py plants one;
- the gate's recommended K for 1.2x: `compare --plan 1.2x` on a history of H launches drawn as a
  trial draws one (each spread planned at its upper bound, as the plan does: analysis/resolution.py).

It prints: at the recommended K, how many of 20 identical groups are clean (no row or series called
changed) and how many of 10 planted 1.2x are caught (compare fails); at K = 1 the share of identical
candidates inconclusive vs passed; and the calibration table, planted 1.2x and 1.5x at K = 1, 2 and
the recommended K: the predicted detection probability of a series (from the noise each trial's
gate measured: analysis/resolution.py) against the observed share of series called a regression.

    python bench/compare_history.py --keep DIR [--pool 100] [--history-runs 40]  # collect, then judge
    python bench/compare_history.py --reuse DIR                                    # judge only
    python bench/compare_history.py --quick --keep DIR                             # 12 launches, fewer trials
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from compare_pairs import called, flagged, slowed, tally  # noqa: E402

from commbench.benchkit import (  # noqa: E402
    Criteria,
    Threshold,
    compare_history,
    detection_probability,
    import_csvs,
    launches_for,
    open_history,
    plan_launches,
    planning_noise,
)

# The sweep of issue 36's measurement, without --raw (the history gate reads the rounds, not the samples).
SWEEP = ["--op", "all_gather", "-b", "8", "-e", "1M", "-f", "4", "--backend", "gloo", "--nproc", "2"]
LOG = "collection.log"


def collect(folder: Path, pool: int) -> list[Path]:
    """The pool's launches, sweeping those the folder lacks; one line per launch with its time and load."""
    folder.mkdir(parents=True, exist_ok=True)
    done = {line.split()[1] for line in (folder / LOG).read_text().splitlines()} if (folder / LOG).exists() else set()
    started = time.monotonic()
    for i in range(1, pool + 1):
        name = f"launch{i:03d}.csv"
        if name in done:
            continue
        load = Path("/proc/loadavg").read_text().split()[0]
        t0 = time.monotonic()
        cmd = [sys.executable, "-m", "commbench", "sweep", *SWEEP, "--no-history", "--no-plot", "--overwrite"]
        proc = subprocess.run(
            [*cmd, "-o", str(folder / name)], capture_output=True, text=True, cwd=REPO, env={**os.environ, "CI": "1"}
        )
        took = time.monotonic() - t0
        if proc.returncode != 0:
            print(f"# launch {i}: sweep failed ({proc.returncode}), left out: {proc.stderr.strip()[-300:]}", flush=True)
            continue
        with open(folder / LOG, "a") as log:
            log.write(
                f"launch {name} {took:.1f}s load-before {load} load-after {Path('/proc/loadavg').read_text().split()[0]}\n"
            )
        print(f"# launch {i}/{pool}: {took:.1f} s, load average {load}", file=sys.stderr, flush=True)
    if (time.monotonic() - started) > 1:
        print(f"# collected in {time.monotonic() - started:.0f} s", flush=True)
    names = [line.split()[1] for line in (folder / LOG).read_text().splitlines()]
    return [folder / n for n in sorted(names) if (folder / n).is_file()]


def collection_facts(folder: Path) -> str:
    lines = [line.split() for line in (folder / LOG).read_text().splitlines()]
    took = [float(w[2].rstrip("s")) for w in lines]
    loads = [float(w[4]) for w in lines]
    return (
        f"{len(lines)} launches, {statistics.median(took):.1f} s each (median; {min(took):.1f}-{max(took):.1f} s), "
        f"load average {min(loads):.1f}-{max(loads):.1f} (median {statistics.median(loads):.1f}) on {os.cpu_count()} cores"
    )


def group_csv(launches: list[Path], out: Path, factor: float, name: str) -> Path:
    """K launches as one `sweep --repeat K` CSV (launch, launch_group), every time scaled by factor,
    stamped after every history run."""
    frames = []
    for k, path in enumerate(launches, start=1):
        part = slowed(path, out.with_name(f"{out.stem}-{k}.csv"), factor) if factor != 1 else path
        frame = pd.read_csv(part, dtype=str, keep_default_na=False)
        if part != path:
            part.unlink()
        frame["launch"], frame["launch_group"] = str(k), name
        frame["timestamp"] = "2100-01-01T00:00:00+00:00"
        frames.append(frame)
    pd.concat(frames).to_csv(out, index=False)
    return out


class Trials:
    """Histories and candidate groups drawn from one pool, judged by the gate."""

    def __init__(self, pool: list[Path], history_runs: int, threshold: str, scratch: Path, seed: int) -> None:
        self.pool, self.h, self.scratch = pool, history_runs, scratch
        self.criteria = Criteria(threshold=Threshold.parse(threshold))
        self.rng = random.Random(seed)
        self.count = 0
        # The whole pool filed once; each trial's history is a copy of it less the launches it does not draw.
        self.master = scratch / "pool.sqlite"
        store = open_history(str(self.master))
        try:
            import_csvs(store, pool)
        finally:
            store.close()
        with sqlite3.connect(self.master) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.run_of = {path: pd.read_csv(path, usecols=["run_id"], dtype=str)["run_id"].iloc[0] for path in pool}

    def history(self, launches: list[Path]) -> Path:
        location = self.scratch / f"h{self.count}.sqlite"
        shutil.copyfile(self.master, location)
        keep = [self.run_of[p] for p in launches]
        marks = ",".join("?" * len(keep))
        with sqlite3.connect(location) as conn:
            for table in ("history_rows", "history_hosts", "history_runs"):
                conn.execute(f"DELETE FROM {table} WHERE run_id NOT IN ({marks})", keep)
        return location

    def judge(self, k: int, factor: float):
        """One trial: a random history of H launches and a disjoint group of K, the group slowed by factor."""
        self.count += 1
        drawn = self.rng.sample(self.pool, self.h + k)
        location = self.history(drawn[: self.h])
        candidate = group_csv(drawn[self.h :], self.scratch / f"c{self.count}.csv", factor, f"g{self.count}")
        store = open_history(str(location), create=False)
        try:
            return compare_history(candidate, store, last=self.h, criteria=self.criteria)
        finally:
            store.close()
            location.unlink()
            candidate.unlink()

    def recommended(self, ratio: float) -> int | None:
        """compare --plan RATIO on a history of H launches drawn as a trial draws its history (not the
        pool's first H: a machine that warms while the pool is collected makes those the quietest)."""
        drawn = random.Random(self.rng.random()).sample(self.pool, self.h + 1)
        location = self.history(drawn[: self.h])
        store = open_history(str(location), create=False)
        try:
            plans = plan_launches(drawn[-1], store, self.h, self.criteria)
        finally:
            store.close()
        needs = [launches_for(ratio, p.noise, p.alpha, p.tests) for p in plans]
        for p, k in zip(plans, needs):
            planned = math.expm1(planning_noise(p.noise).spread)
            print(
                f"# plan: {p.key[0]}/{p.key[1]} run-to-run sd {math.expm1(p.noise.spread):.1%} "
                f"(planned at {planned:.1%}): {ratio}x needs {k}"
            )
        return None if None in needs else max(needs)


def outcome(result) -> str:
    return "failed" if result.failed else "inconclusive" if result.inconclusive else "passed"


def predicted(result, factor: float, k: int) -> list[float]:
    """Each series' chance of being called a regression, from the noise this trial's gate measured."""
    threshold = math.log(result.criteria.series_threshold.ratio(1.0))
    return [
        detection_probability(math.log(factor), s.noise, result.criteria.alpha, len(result.shifts), k, threshold)
        for s in result.shifts
        if s.noise is not None
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pool", type=int, default=100, help="independent launches to collect (default 100)")
    parser.add_argument("--history-runs", type=int, default=40, help="H: launches in each trial's history (--last)")
    parser.add_argument("--threshold", default="10%", help="compare --threshold (default 10%%: below a 1.2x)")
    parser.add_argument("--identical", type=int, default=20, help="identical candidate groups judged")
    parser.add_argument("--planted", type=int, default=10, help="planted 1.2x groups judged")
    parser.add_argument("--calibration", type=int, default=20, help="trials per cell of the calibration table")
    parser.add_argument("--seed", type=int, default=38)
    parser.add_argument("--quick", action="store_true", help="12 launches, H 5, 10/5/8 trials: a smoke run")
    parser.add_argument("--keep", type=Path, default=None, help="collect the pool into this folder (resumes)")
    parser.add_argument("--reuse", type=Path, default=None, help="judge the pool a --keep folder holds; sweep nothing")
    parser.add_argument("--collect-only", action="store_true", help="with --keep: collect the pool, judge nothing")
    opts = parser.parse_args()
    if opts.quick:
        opts.pool, opts.history_runs, opts.identical, opts.planted, opts.calibration = 12, 5, 10, 5, 8
    with tempfile.TemporaryDirectory() as scratch:
        folder = opts.reuse or opts.keep or Path(scratch) / "pool"
        pool = collect(folder, opts.pool) if opts.reuse is None else collect(folder, 0)
        print(f"# pool {folder}: {collection_facts(folder)}; sweep {' '.join(SWEEP)}")
        if opts.collect_only:
            return
        if len(pool) < opts.history_runs + 2:
            print(f"# the pool holds {len(pool)} launches: too few for histories of {opts.history_runs}; collect more")
            return
        trials = Trials(pool, opts.history_runs, opts.threshold, Path(scratch), opts.seed)
        k_rec = trials.recommended(1.2)
        k_max = len(pool) - opts.history_runs
        if k_rec is None or k_rec > k_max:
            print(f"# recommended K for 1.2x: {k_rec} (the pool allows at most {k_max} beside H = {opts.history_runs})")
            k_rec = min(k_rec or k_max, k_max)
        print(
            f"# gate: compare --history --last {opts.history_runs} --threshold {opts.threshold}; recommended K for 1.2x: {k_rec}"
        )
        per_launch = statistics.median(
            float(line.split()[2].rstrip("s")) for line in (folder / LOG).read_text().splitlines()
        )
        print(f"# a candidate of K = {k_rec} launches costs about {k_rec * per_launch:.0f} s of sweeping here")
        same = [trials.judge(k_rec, 1.0) for _ in range(opts.identical)]
        clean = sum(not flagged(tally(r)) for r in same)
        shares = {o: sum(outcome(r) == o for r in same) for o in ("passed", "inconclusive", "failed")}
        for r in same:
            if flagged(tally(r)):
                print(f"#   identical group flagged {called(tally(r))}")
        planted = [trials.judge(k_rec, 1.2) for _ in range(opts.planted)]
        caught = sum(r.failed for r in planted)
        print(
            f"K = {k_rec} (recommended): {clean}/{opts.identical} identical groups clean "
            f"({shares['passed']} passed, {shares['inconclusive']} inconclusive, {shares['failed']} failed); "
            f"planted 1.2x caught in {caught}/{opts.planted}"
        )
        once = [trials.judge(1, 1.0) for _ in range(opts.identical)]
        shares = {o: sum(outcome(r) == o for r in once) for o in ("passed", "inconclusive", "failed")}
        print(
            f"K = 1: of {opts.identical} identical candidates {shares['inconclusive']} inconclusive, "
            f"{shares['passed']} passed, {shares['failed']} failed "
            f"(median series resolution {statistics.median(s.resolution for r in once for s in r.shifts):.2f}x)"
        )
        print(
            "| planted | K | trials | series judged | predicted detection (mean) | observed share called regression | compare failed |"
        )
        print("|---|---|---|---|---|---|---|")
        for factor in (1.2, 1.5):
            for k in sorted({1, 2, k_rec}):
                results = [trials.judge(k, factor) for _ in range(opts.calibration)]
                chances = [p for r in results for p in predicted(r, factor, k)]
                calls = [s.verdict == "regression" for r in results for s in r.shifts if s.noise is not None]
                print(
                    f"| {factor}x | {k} | {len(results)} | {len(calls)} | {statistics.fmean(chances):.0%} | "
                    f"{statistics.fmean(calls):.0%} | {sum(r.failed for r in results)}/{len(results)} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
