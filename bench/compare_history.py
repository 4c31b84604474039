"""Does `commbench compare` against the history beat the pairwise test? The same runs, judged both ways.

25 identical `commbench sweep --op all_gather -b 8 -e 1M -f 4 --raw` runs back to back on 2 Gloo
ranks, each filing itself in one history. Runs 6 to 25 are candidates: each is judged against the
5 runs before it (`compare --last 5 CANDIDATE.csv`) and, as today, pairwise against the one run before
it (`compare BEFORE.csv CANDIDATE.csv`). A candidate is clean when nothing is flagged (no row and no
series called a regression or an improvement). Then the first 10 candidates get a planted 1.2x
slowdown, exactly as bench/compare_pairs.py plants one (every time scaled, the run's own noise
kept), and are judged both ways again: caught when compare fails.

    python bench/compare_history.py [--runs 25] [--last 5] [--planted 10] [--keep DIR | --reuse DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from compare_pairs import SWEEP, called, flagged, slowed, sweep, tally  # noqa: E402

from commbench.benchkit import (  # noqa: E402
    compare_history,
    compare_runs,
    open_history,
)

FACTOR = 1.2


def judge(history_path: Path, runs: list[Path], k: int, last: int, candidate: Path) -> tuple[dict, dict]:
    """The candidate (run k, or a planted copy of it) against the history and against run k - 1."""
    history = open_history(str(history_path), create=False)
    try:
        against_history = tally(compare_history(candidate, history, last=last))
    finally:
        history.close()
    return against_history, tally(compare_runs(runs[k - 1], candidate))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=25)
    parser.add_argument("--last", type=int, default=5)
    parser.add_argument("--planted", type=int, default=10)
    parser.add_argument("--keep", type=Path, default=None, help="keep the runs and their history in this folder")
    parser.add_argument("--reuse", type=Path, default=None, help="judge the runs a --keep folder holds; run nothing")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = opts.reuse or opts.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        history = folder / "history.sqlite"
        runs = [folder / f"r{i:02d}.csv" for i in range(1, opts.runs + 1)]
        if opts.reuse is None:
            for i, run in enumerate(runs, start=1):
                sweep(run, ["--history", str(history)])
                print(f"# run {i}/{opts.runs} done", file=sys.stderr, flush=True)
        scores = {"history clean": 0, "pairwise clean": 0, "history caught": 0, "pairwise caught": 0}
        candidates = range(opts.last, opts.runs)
        for n, k in enumerate(candidates):
            same_h, same_p = judge(history, runs, k, opts.last, runs[k])
            scores["history clean"] += not flagged(same_h)
            scores["pairwise clean"] += not flagged(same_p)
            line = (
                f"run {k + 1:>2}: same command: history {'FLAGGED ' + called(same_h) if flagged(same_h) else 'clean'}, "
                f"pairwise {'FLAGGED ' + called(same_p) if flagged(same_p) else 'clean'}"
            )
            if n < opts.planted:
                planted = slowed(runs[k], Path(scratch) / f"planted-{k + 1}.csv", FACTOR)
                slow_h, slow_p = judge(history, runs, k, opts.last, planted)
                scores["history caught"] += bool(slow_h["failed"])
                scores["pairwise caught"] += bool(slow_p["failed"])
                line += (
                    f"; planted {FACTOR}x: history {'caught' if slow_h['failed'] else 'missed'} "
                    f"({slow_h['series regression']}/{slow_h['series']} series, {slow_h.get('regression', 0)}/{slow_h['rows']} rows), "
                    f"pairwise {'caught' if slow_p['failed'] else 'missed'} "
                    f"({slow_p['series regression']}/{slow_p['series']} series, {slow_p.get('regression', 0)}/{slow_p['rows']} rows)"
                )
            print(line, flush=True)
    total, planted = len(candidates), min(opts.planted, len(candidates))
    print(
        f"# sweep {' '.join(SWEEP)}; {opts.runs} runs; each of runs {opts.last + 1}-{opts.runs} judged by compare's defaults"
    )
    print(
        f"compare --last {opts.last} (history): {scores['history clean']}/{total} identical runs clean, "
        f"planted {FACTOR}x caught in {scores['history caught']}/{planted}"
    )
    print(
        f"compare pairwise (against the run before): {scores['pairwise clean']}/{total} identical runs clean, "
        f"planted {FACTOR}x caught in {scores['pairwise caught']}/{planted}"
    )


if __name__ == "__main__":
    main()
