"""Do the readers scale with the results they are given? compare, report, plot and model of N rows.

Writes a results CSV of N rows with the real writer and schema (commbench's CsvAppender, COLUMNS,
Stats of each row's own samples, three rounds per row), then runs each command on it as a
subprocess of the working tree's CLI and prints its wall time, its peak memory (the child's
ru_maxrss, the pool of chart processes included) and rows/s, with the load average beside them.

The file is a scaling study as one CSV holds it: runs at several world sizes (one run_id each, so
the file is a valid `compare` input against itself: its rows' keys differ by the world size), each
over ops and their variants, two dtypes and a dense size grid (the sizes per series grow with N).
The number of charts does not grow with N (one per op, phase and dtype, plus the speedups), so
what grows is the rows each command reads, judges and draws: the per-row work.

    python bench/readers_scale.py [--rows 10000,100000] [--commands compare,report,plot,model] [--keep DIR]

Target on the shared 2-core machine: each command of 100,000 rows under 10 s, memory bounded.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from commbench.benchkit import COLUMNS, CsvAppender, Stats, bandwidth_gbps, percentile, registry  # noqa: E402

# Ops of a scaling study: a few families, so the chart count stays that of a real sweep.
OPS = ("all_gather", "all_reduce", "reduce_scatter_base", "grouped_all_gather", "bucketed_all_reduce")
DTYPES = ("float32", "bfloat16")
WORLD_SIZES = (2, 4, 8, 16, 32)
ITERS, ROUNDS = 30, 3
COMMANDS = ("compare", "report", "plot", "model")


def series() -> list[tuple[str, str, str, float]]:
    """(op, variant, phase, bus factor at n=2) of every line the study measures."""
    specs = {name: cls.spec for name, cls in registry().items()}
    return [
        (op, variant, phase, specs[op].bus_factor.factor(2))
        for op in OPS
        for variant in specs[op].variants
        for phase in specs[op].phases
    ]


def sizes_for(count: int) -> list[int]:
    """`count` distinct sizes (multiples of 8 bytes) spread geometrically from 8 B up."""
    found: list[int] = []
    top = 1 << 30
    for i in range(count * 4):
        size = round(8 * (top / 8) ** (i / max(count - 1, 1)) / 8) * 8
        if not found or size > found[-1]:
            found.append(size)
        elif found[-1] + 8 <= top:
            found.append(found[-1] + 8)
        if len(found) == count:
            break
    return found


def generate(path: Path, rows: int, seed: int = 1) -> int:
    """Write a results CSV of about `rows` rows; returns how many it wrote."""
    rng = random.Random(seed)
    lines = series()
    per_size = len(lines) * len(DTYPES) * len(WORLD_SIZES)
    sizes = sizes_for(max(1, math.ceil(rows / per_size)))
    writer = CsvAppender(path, COLUMNS)
    written = 0
    for world in WORLD_SIZES:
        run_id = f"study-n{world}"
        base = {
            "schema_version": 2,
            "run_id": run_id,
            "timestamp": "2026-12-01T00:00:00+00:00",
            "mode": "blocking",
            "world_size": world,
            "group": "world",
            "group_size": world,
            "backend": "gloo",
            "iters": ITERS,
            "warmup": 5,
            "window": 1,
            "rounds": ROUNDS,
            "timer": "perf_counter",
            "hosts": "bench",
            "node_ranks": f"0-{world - 1}@bench/0",
            "torch_version": "2.13.0+cpu",
            "backend_version": "gloo (torch 2.13.0+cpu)",
            "commbench_version": "0.1.0",
            "command": f"commbench sweep --nproc {world} -b 8 -e 1G --op {','.join(OPS)} --dtype {','.join(DTYPES)}",
            "fingerprint": f"bench{world}",
        }
        batch = []
        for op, variant, phase, factor in lines:
            slower = 1.0 + 0.3 * (zlib.crc32(f"{op}/{variant}".encode()) % 4)
            for dtype in DTYPES:
                for size in sizes:
                    if written >= rows:
                        break
                    centre = (30.0 + 20 * math.log2(world) + size / 2000.0) * slower
                    by_round = [
                        [centre * math.exp(rng.gauss(0, 0.05) + drift) for _ in range(ITERS // ROUNDS)]
                        for drift in (rng.gauss(0, 0.03) for _ in range(ROUNDS))
                    ]
                    stats = Stats.from_samples([t for block in by_round for t in block])
                    algbw, busbw = bandwidth_gbps(size, stats.headline, factor)
                    batch.append(
                        {
                            **base,
                            "op": op,
                            "variant": variant,
                            "phase": phase,
                            "dtype": dtype,
                            "size_bytes": size,
                            "count": size // (4 if dtype == "float32" else 2),
                            "api": op,
                            "calls": 1,
                            **stats.as_dict(),
                            "time_us_p50_rounds": ";".join(f"{percentile(sorted(b), 50):.6g}" for b in by_round),
                            "time_us_mean_rounds": ";".join(f"{sum(b) / len(b):.6g}" for b in by_round),
                            "algbw_gbps": algbw,
                            "busbw_gbps": busbw,
                            "wrong": 0,
                            "status": "ok",
                            "note": "",
                        }
                    )
                    written += 1
            writer.write_many(batch)
            batch = []
    writer.close()
    return written


def command_line(name: str, csv: Path, out: Path) -> list[str]:
    cli = [sys.executable, "-m", "commbench"]
    return {
        "compare": [*cli, "compare", str(csv), str(csv)],
        "report": [*cli, "report", str(csv), "-o", str(out / "report.html"), "--overwrite"],
        "plot": [*cli, "plot", str(csv), "-o", str(out / "charts"), "--overwrite"],
        "model": [*cli, "model", str(csv), "-o", str(out / "model"), "--overwrite"],
    }[name]


def measure(cmd: list[str]) -> tuple[float, float, float, int, str]:
    """(wall s, CPU s, peak RSS MiB of the command and its children, exit code, last stderr line).
    CPU seconds (user + system, the chart processes included) are what a loaded machine's wall time
    hides: the lead's quiet rerun reads the wall time."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "CI": "1", "MPLBACKEND": "Agg"}
    start = time.monotonic()
    # Each command in its own python -c wrapper: the wrapper's RUSAGE_CHILDREN is that command's
    # peak (the largest of it and the chart processes it forked), not the bench's running maximum.
    wrapper = (
        "import resource, subprocess, sys; "
        "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode; "
        "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
        "print(u.ru_utime + u.ru_stime, u.ru_maxrss, file=sys.stderr); sys.exit(rc)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", wrapper, *cmd], capture_output=True, text=True, cwd=REPO, env=env, check=False
    )
    wall = time.monotonic() - start
    lines = proc.stderr.strip().splitlines() or ["0 0"]
    cpu, peak_kib = (float(v) for v in lines[-1].split())
    said = next((line for line in reversed(lines[:-1]) if line.strip()), "")
    return wall, cpu, peak_kib / 1024, proc.returncode, said


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="100000", help="row counts to measure, e.g. 10000,100000")
    parser.add_argument("--commands", default=",".join(COMMANDS))
    parser.add_argument("--keep", type=Path, default=None, help="write the files into this folder and keep them")
    opts = parser.parse_args()
    counts = [int(float(r.replace("k", "e3"))) for r in opts.rows.split(",")]
    commands = [c for c in opts.commands.split(",") if c]
    unknown = [c for c in commands if c not in COMMANDS]
    if unknown:
        parser.error(f"unknown command(s) {', '.join(unknown)}; choose from {', '.join(COMMANDS)}")
    print(f"# readers at scale: {', '.join(commands)} of a generated results CSV (2 dtypes, ops {', '.join(OPS)},")
    print(f"# world sizes {', '.join(map(str, WORLD_SIZES))}: one run each); load average before: {_load()}")
    print(
        f"{'rows':>8} {'MB':>6} {'command':>8} {'wall s':>7} {'CPU s':>7} {'rows/s':>9} {'peak MiB':>9} {'rc':>3}  load   said"
    )
    failed = False
    with tempfile.TemporaryDirectory() as scratch:
        folder = opts.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        for rows in counts:
            csv = folder / f"study-{rows}.csv"
            written = generate(csv, rows)
            megabytes = csv.stat().st_size / 1e6
            for name in commands:
                out = folder / f"out-{rows}"
                out.mkdir(exist_ok=True)
                wall, cpu, peak, rc, said = measure(command_line(name, csv, out))
                failed |= rc not in (0, 1)  # compare exits 1 when it finds a regression: a verdict, not a failure
                print(
                    f"{written:>8} {megabytes:>6.1f} {name:>8} {wall:>7.2f} {cpu:>7.2f} {written / wall:>9,.0f} {peak:>9.0f} "
                    f"{rc:>3}  {_load():<5}  {said[:70]}",
                    flush=True,
                )
    print(f"# load average after: {_load()}; own peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MiB")
    sys.exit(1 if failed else 0)


def _load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


if __name__ == "__main__":
    main()
