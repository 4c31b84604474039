"""Repeatability against PARAM: how far one size's headline moves between rounds, commbench's way
and PARAM comms' way, measured in the same rounds on the same machine.

Each round runs, per op, commbench's defaults (`commbench sweep --op OP --variant flat --raw`, 2
Gloo ranks) and a bare loop written here from PARAM comms' description of `--n 20 --w 5 --z 1`:
per rank 5 warm-up iterations, then 20 iterations each of barrier, timer start, op, wait, timer
stop; a rank's figure is its mean over the 20, and the reported figure is the median of those
over the ranks. Rounds alternate the order (commbench first, then the bare loop first), so that
neither always runs on the machine the other left.

Spread = max/min of one size's figure over the rounds (1.00: identical). Per size it is printed
for the bare loop, for the headline commbench writes (time_us_mean), its written p50, and for each candidate
headline computed from the same rows' --raw samples (so every candidate sees the same
iterations): the median of the per-iteration maxima (today's p50), their mean, their 10%-trimmed
mean, the median of the per-round means, the median of the lower mode, and PARAM's per-rank mean
then median over ranks. Then per op and candidate the median and the worst spread over the sizes,
and for reduce_scatter_base the modes of its samples at 64 B to 32 KB (--modes).

    python bench/repeatability.py [--rounds 5] [--ops all_gather,reduce_scatter_base,all_reduce]
                                  [-b 8] [-e 256K] [-f 8] [--also "--rounds 5"] [--keep DIR | --reuse DIR]
    python bench/repeatability.py --rounds 2 --ops all_reduce -e 4K        # the quick form

Unattended: every failure is one line and a non-zero exit; otherwise it exits 0. The machine's
load average is printed beside the figures: spreads are ratios within one run, but a loaded
machine widens every one of them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from commbench.benchkit import lower_mode, parse_size, raw_path, split_modes  # noqa: E402

OPS = ("all_gather", "reduce_scatter_base", "all_reduce")
PARAM_ITERS, PARAM_WARMUP = 20, 5
BARE = "PARAM loop"
WRITTEN = "written headline"  # time_us_mean, the row's headline
WRITTEN_P50 = "written p50"


def _mean(values: list[float]) -> float:
    return statistics.fmean(values)


def _trimmed(values: list[float], share: float = 0.10) -> float:
    s = sorted(values)
    cut = int(len(s) * share)
    return statistics.fmean(s[cut : len(s) - cut] or s)


# Candidate headlines of a row, each from its per-iteration samples: maxima (each iteration's max
# over ranks, in order), their rounds, and each rank's own samples.
CANDIDATES = {
    "median of maxima": lambda row: statistics.median(row["maxima"]),
    "mean of maxima": lambda row: _mean(row["maxima"]),
    "trimmed mean": lambda row: _trimmed(row["maxima"]),
    "median of round means": lambda row: statistics.median(_mean(r) for r in row["rounds"]),
    "lower-mode median": lambda row: lower_mode(row["maxima"]),  # split_modes at MODE_GAP
    "rank means, median": lambda row: statistics.median(_mean(r) for r in row["ranks"]),
}


def sweep(out: Path, op: str, sizes: str, extra: list[str]) -> None:
    cmd = [sys.executable, "-m", "commbench", "sweep", "--op", op, "--variant", "flat", "--sizes", sizes]
    cmd += ["--nproc", "2", "--backend", "gloo", "--raw", "--no-plot", "--no-history", *extra, "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env={**os.environ, "CI": "1"}, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"repeatability: sweep failed ({proc.returncode}): {' '.join(cmd)}: {tail}")


def rows_of(csv: Path) -> dict[int, dict]:
    """Per size: the written headline (the mean) and p50, and the samples."""
    summary = pd.read_csv(csv)
    summary = summary[summary["status"] == "ok"]
    raw = pd.read_csv(raw_path(csv))
    found: dict[int, dict] = {}
    for size, samples in raw.groupby("size_bytes"):
        by_iteration = samples.groupby("iteration")
        maxima = by_iteration["time_us"].max()
        round_of = by_iteration["round"].first()
        row = summary[summary["size_bytes"] == size].iloc[0]
        found[int(size)] = {
            "written": float(row["time_us_mean"]),
            "written p50": float(row["time_us_p50"]),
            "maxima": maxima.tolist(),
            "rounds": [maxima[round_of == r].tolist() for r in sorted(round_of.unique())],
            "ranks": [g.sort_values("iteration")["time_us"].tolist() for _, g in samples.groupby("rank")],
        }
    return found


def bare_loop(op: str, sizes: list[int], out: Path) -> None:
    """The PARAM-style loop on 2 Gloo ranks (this file run with --bare), its figures into out."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo"}
    cmd = [sys.executable, __file__, "--bare", op, ",".join(map(str, sizes)), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=600, check=False)
    if proc.returncode != 0 or not out.exists():
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"repeatability: the bare loop failed ({proc.returncode}) on {op}: {tail}")


def _bare_rank(rank: int, op: str, sizes: list[int], out: str) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=rank, world_size=2)
    n = dist.get_world_size()
    figures = {}
    for size in sizes:
        count = max(1, size // 4)  # float32 elements of S (commbench's S of each op)
        if op == "all_gather":
            inp, outp = torch.ones(max(1, count // n)), torch.empty(max(1, count // n) * n)
            call = lambda i=inp, o=outp: dist.all_gather_into_tensor(o, i, async_op=True)  # noqa: E731
        elif op == "reduce_scatter_base":
            inp, outp = torch.ones(max(1, count // n) * n), torch.empty(max(1, count // n))
            call = lambda i=inp, o=outp: dist.reduce_scatter_tensor(o, i, async_op=True)  # noqa: E731
        else:
            inp = torch.ones(count)
            call = lambda i=inp: dist.all_reduce(i, async_op=True)  # noqa: E731
        for _ in range(PARAM_WARMUP):
            call().wait()
        times = []
        for _ in range(PARAM_ITERS):
            dist.barrier()
            start = time.perf_counter()
            call().wait()
            times.append((time.perf_counter() - start) * 1e6)
        means = [None] * n
        dist.all_gather_object(means, statistics.fmean(times))
        figures[size] = statistics.median(means)
    if rank == 0:
        Path(out).write_text(json.dumps(figures))
    dist.barrier()
    dist.destroy_process_group()


def _bare_main(op: str, sizes: str, out: str) -> None:
    import torch.multiprocessing as mp

    mp.spawn(_bare_rank, args=(op, [int(s) for s in sizes.split(",")], out), nprocs=2)


def spread(values: list[float]) -> float:
    return max(values) / min(values) if values and min(values) > 0 else math.nan


def modes_table(runs: list[dict[int, dict]], sizes: list[int]) -> list[str]:
    """reduce_scatter_base's samples by mode: per size and round, the share of iterations in the
    slow mode (above the largest gap, lower_mode's split), both modes' medians, and which mode the
    written p50 fell in."""
    lines = [
        "# reduce_scatter_base samples (per-iteration maxima) by mode (split_modes), 64 B to 32 KB, per round: "
        "share in the slow mode, fast/slow medians (us), the mode the written p50 lies in"
    ]
    for size in (s for s in sizes if 64 <= s <= 32 * 1024):
        cells = []
        for run in runs:
            row = run.get(size)
            if row is None:
                continue
            fast, slow = split_modes(row["maxima"])
            mode = "slow" if slow and row["written"] >= slow[0] else "fast"
            cells.append(
                f"{len(slow) / len(row['maxima']):.0%} {statistics.median(fast):.0f}/"
                f"{statistics.median(slow) if slow else float('nan'):.0f} {mode}"
            )
        lines.append(f"{size:>8}  " + " | ".join(cells))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("-b", default="8")
    parser.add_argument("-e", default="256K")
    parser.add_argument("-f", type=int, default=8)
    parser.add_argument("--also", action="append", default=[], help="another commbench setting, e.g. '--rounds 5'")
    parser.add_argument("--keep", type=Path, default=None, help="keep every round's files in this folder")
    parser.add_argument("--reuse", type=Path, default=None, help="judge the rounds a --keep folder holds; run nothing")
    parser.add_argument("--bare", nargs=3, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.bare:
        _bare_main(*opts.bare)
        return
    ops = [op for op in opts.ops.split(",") if op]
    unknown = [op for op in ops if op not in OPS]
    if unknown or opts.rounds < 2:
        parser.error(
            f"--ops takes {', '.join(OPS)}; --rounds at least 2" + (f" (got {', '.join(unknown)})" if unknown else "")
        )
    sizes, size = [], parse_size(opts.b)
    while size <= parse_size(opts.e):
        sizes.append(size)
        size *= opts.f
    settings = {"defaults": [], **{also: also.split() for also in opts.also}}
    load_before = _load()
    with tempfile.TemporaryDirectory() as scratch:
        folder = opts.reuse or opts.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        for k in range(opts.rounds if opts.reuse is None else 0):
            for op in ops:
                steps = [("bare", None), *settings.items()]
                for name, extra in steps if k % 2 else steps[::-1]:
                    # A --keep folder's finished steps are kept: an interrupted run resumes where it stopped.
                    if name == "bare":
                        out = folder / f"{k}-{op}-bare.json"
                        if not out.exists():
                            bare_loop(op, sizes, out)
                    else:
                        out = folder / f"{k}-{op}-{list(settings).index(name)}.csv"
                        if not (out.exists() and raw_path(out).exists()):
                            out.unlink(missing_ok=True)
                            sweep(out, op, ",".join(map(str, sizes)), extra)
            print(f"# round {k + 1}/{opts.rounds} done (load {_load()})", file=sys.stderr, flush=True)
        report(folder, ops, sizes, settings, opts.rounds, load_before)


def report(folder: Path, ops: list[str], sizes: list[int], settings: dict, rounds: int, load_before: str) -> None:
    print(f"# repeatability: {rounds} interleaved rounds, 2 Gloo ranks, flat variant, sizes {sizes[0]}..{sizes[-1]} B")
    print(f"# load average: {load_before} before, {_load()} after (1-minute)")
    print(f"# spread = max/min over the rounds of a size's figure; {BARE}: --n {PARAM_ITERS} --w {PARAM_WARMUP} --z 1")
    summary: list[tuple[str, str, float, float]] = []
    for op in ops:
        bare = [json.loads((folder / f"{k}-{op}-bare.json").read_text()) for k in range(rounds)]
        for s, name in enumerate(settings):
            runs = [rows_of(folder / f"{k}-{op}-{s}.csv") for k in range(rounds)]
            columns = {BARE: [[b[str(size)] for b in bare] for size in sizes]}
            columns[WRITTEN] = [[r[size]["written"] for r in runs] for size in sizes]
            columns[WRITTEN_P50] = [[r[size]["written p50"] for r in runs] for size in sizes]
            for candidate, figure in CANDIDATES.items():
                columns[candidate] = [[figure(r[size]) for r in runs] for size in sizes]
            print(f"\n## {op} ({name})")
            print("| size | " + " | ".join(columns) + " |")
            print("|---:|" + "---:|" * len(columns))
            for i, size in enumerate(sizes):
                print(f"| {size} | " + " | ".join(f"{spread(v[i]):.2f}" for v in columns.values()) + " |")
            for column, values in columns.items():
                spreads = [spread(v) for v in values]
                summary.append((f"{op} ({name})", column, statistics.median(spreads), max(spreads)))
            if op == "reduce_scatter_base":
                print()
                print("\n".join(modes_table(runs, sizes)))
    print("\n## median and worst spread over the sizes")
    print("| op | figure | median | worst |\n|---|---|---:|---:|")
    for op, column, median, worst in summary:
        print(f"| {op} | {column} | {median:.2f} | {worst:.2f} |")
    print()
    figures = {(op, column): (median, worst) for op, column, median, worst in summary}
    for op in dict.fromkeys(op for op, _, _, _ in summary):
        (hm, hw), (pm, pw) = figures[(op, WRITTEN)], figures[(op, BARE)]
        verdict = "at least as well as" if hm <= pm else "worse than"
        worst = "no worse" if hw <= pw else "worse"
        print(
            f"# {op}: the headline repeats {verdict} the {BARE} (median spread over the sizes {hm:.2f} against "
            f"{pm:.2f}); its worst size is {worst} ({hw:.2f} against {pw:.2f})"
        )


def _load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


if __name__ == "__main__":
    main()
