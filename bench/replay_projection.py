"""Does `replay --project` predict what a replay measures on more ranks? The same DDP job recorded at
2, 3 and 4 Gloo ranks, each recording replayed on as many ranks, each projected to its own world
size from the latency-bandwidth model fitted on one 2-rank sweep of the job's ops.

- The job: tests/support/recorded_jobs.py's "ddp" (Linear/BatchNorm model, 1 MB gradient buckets,
  its buffers broadcast each step), recorded by torch.profiler on real Gloo ranks as a user records
  it; the kineto traces of every rank are what is replayed.
- The fit: `commbench sweep` of all_reduce (float32) and broadcast (float32, int64: DDP broadcasts
  an int64 counter) on 2 ranks at -b 8 to -e 8M (factor 4; the step's calls are 8 B to 1 MB).
- Each n: `commbench replay <n traces> --nproc n --project n --model <the sweep>`: measured is the
  step's p50 (its calls issued back to back, results/stats.TYPICAL), projected the projection line's
  figure (each call's fit projected to n ranks at its S, times its count, summed). The calls timed
  one at a time and added up (the replay's other figure) are printed beside the step.

The fit and the replays are measured --repeats times over (a fresh sweep each time, the replays
right after it), each repeat's projected/measured from measurements minutes apart; the summary
gives each figure's median over the repeats and the ratio's range. Every run is timed on a shared
machine: the load average is printed beside each figure, and the table is only worth what the load
was. --small develops the script (short budgets, one repeat); the figure quoted in
commbench/replay/projection.py (MEASURED_ERROR) comes from a full run.

    python bench/replay_projection.py [--ranks 2 3 4] [--time-per-size 0.2] [--rounds 3] [--repeats 3]
                                      [--small] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The step's ops and dtypes (DDP broadcasts an int64 counter beside its float32 buffers), 8 B to 8 MB:
# the step's calls are 8 B to 1 MB, and the sizes above them give the line its slope.
SWEEPS = {"all_reduce": ("float32",), "broadcast": ("float32", "int64")}
SIZES = ("-b", "8", "-e", "8M", "-f", "4")
QUIET = ("--backend", "gloo", "--no-history", "--no-plot", "--overwrite")


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def commbench(*args: str) -> str:
    """One commbench command in its own process, as a user runs it: its output (all of it, and exit, when it fails)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}
    done = subprocess.run([sys.executable, "-m", "commbench", *args], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"commbench {' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


def record_ddp(folder: Path, world: int) -> list[str]:
    """The DDP job on `world` real Gloo ranks, profiled (3 steps after a warm-up): every rank's kineto trace."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from tests.support.recorded_jobs import record

    return record("ddp", folder / f"ddp{world}", world_size=world, steps=3).kineto()


def swept(out: Path, budget: tuple[str, ...]) -> list[str]:
    """The 2-rank sweeps the model is fitted on: --model and each CSV, for replay's arguments."""
    models = []
    for op, dtypes in SWEEPS.items():
        csv = out / f"sweep-{op}-n2.csv"
        commbench("sweep", "--op", op, *(a for d in dtypes for a in ("--dtype", d)), *SIZES, "--nproc", "2",
                  "-o", str(csv), *budget, *QUIET)  # fmt: skip
        models += ["--model", str(csv)]
    return models


def replayed(
    traces: list[str], world: int, models: list[str], budget: tuple[str, ...], out: Path
) -> dict[str, float] | str:
    """Replay the n-rank traces on n ranks, projected to n: the step's p50, the calls' sum and the
    projection (µs); or why a call was left out of the projection (a fit refused: no ratio to give)."""
    report = out / f"replay{world}.json"
    commbench(
        "replay", *traces, "--nproc", str(world), "--project", str(world), *models,
        "--json", str(report), "-o", str(out / f"replay{world}.csv"), *budget, *QUIET,
    )  # fmt: skip
    document = json.loads(report.read_text())
    step = next(r for r in document["rows"] if r["kind"] == "step")
    alone = sum(float(r["replayed_us_per_step"]) for r in document["rows"] if r["kind"] == "call")
    (projection,) = [p for p in document["projection"]["rows"] if p["world_size"] == world]
    if projection["not_projected"]:
        return f"{world:>2} | not projected: {'; '.join(projection['not_projected'])}"
    return {"measured": float(step["time_us_p50"]), "alone": alone, "projected": float(projection["time_us"])}


HEAD = f"{'n':>2} | {'projected':>10} | {'measured':>10} | {'proj/meas':>9} | {'calls alone':>11} | {'proj/alone':>10}"


def row(n: int, projected: float, measured: float, alone: float, ratios: tuple[float, float]) -> str:
    return (
        f"{n:>2} | {projected / 1e3:>7.2f} ms | {measured / 1e3:>7.2f} ms | {ratios[0]:>9.2f} | "
        f"{alone / 1e3:>8.2f} ms | {ratios[1]:>10.2f}"
    )


def one(n: int, r: dict[str, float]) -> str:
    ratios = (r["projected"] / r["measured"], r["projected"] / r["alone"])
    return row(n, r["projected"], r["measured"], r["alone"], ratios)


def summary(runs: dict[int, list[dict[str, float]]], loads: list[float]) -> list[str]:
    """Per n, the median over the repeats of each figure and of each ratio (the step's ratio's range
    beside it): each repeat's ratio pairs a fit and replays measured minutes apart."""
    lines = [f"{HEAD} | proj/meas min-max"]
    for n, repeats in runs.items():
        if not repeats:
            lines.append(f"{n:>2} | no repeat projected every call (a fit was refused: see above)")
            continue
        median = {k: statistics.median(r[k] for r in repeats) for k in repeats[0]}
        step = [r["projected"] / r["measured"] for r in repeats]
        alone = statistics.median(r["projected"] / r["alone"] for r in repeats)
        ratios = (statistics.median(step), alone)
        line = row(n, median["projected"], median["measured"], median["alone"], ratios)
        lines.append(f"{line} | {min(step):.2f}-{max(step):.2f}")
    lines.append(f"# load average (1 min) after each replay: {min(loads):.2f}-{max(loads):.2f}; now {load()}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--time-per-size", type=float, default=0.2, help="seconds per row, sweep and replays")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3, help="times the fit and the replays are measured again")
    parser.add_argument("--small", action="store_true", help="develop the script: 0.05 s per row, 2 rounds, 1 repeat")
    parser.add_argument("--keep", type=Path, default=None, help="keep the traces, sweeps and replays here")
    args = parser.parse_args()
    per_row, rounds, repeats = (0.05, 2, 1) if args.small else (args.time_per_size, args.rounds, args.repeats)
    budget = ("--time-per-size", str(per_row), "--rounds", str(rounds))
    runs: dict[int, list[dict[str, float]]] = {n: [] for n in args.ranks}
    loads: list[float] = []
    with tempfile.TemporaryDirectory() as scratch:
        out = args.keep or Path(scratch)
        out.mkdir(parents=True, exist_ok=True)
        traces = {n: record_ddp(out, n) for n in args.ranks}
        print(f"# recorded the DDP job at {', '.join(map(str, args.ranks))} ranks; load {load()}", flush=True)
        print(
            f"# {per_row} s per row, {rounds} rounds; {os.cpu_count()} cores; measured: the step's p50 (back to back)"
        )
        for repeat in range(repeats):
            here = out / f"repeat{repeat}"
            here.mkdir(exist_ok=True)
            models = swept(here, budget)
            fits = commbench("model", *models[1::2], "-o", str(here / "model"), "--overwrite")
            print(f"# repeat {repeat + 1} of {repeats}: the 2-rank fits (load {load()})", flush=True)
            print("\n".join(line for line in fits.splitlines() if not line.startswith("# charts")))
            print(f"{HEAD} | load after (1, 5, 15 min)", flush=True)
            for n in args.ranks:
                result = replayed(traces[n], n, models, budget, here)
                loads.append(os.getloadavg()[0])
                if isinstance(result, str):
                    print(f"{result} | {load()}", flush=True)
                    continue
                runs[n].append(result)
                print(f"{one(n, result)} | {load()}", flush=True)
    print(f"# over {repeats} repeat(s): the medians")
    print("\n".join(summary(runs, loads)))


if __name__ == "__main__":
    main()
