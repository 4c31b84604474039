"""Where a sweep's wall time goes: the working tree against git refs, interleaved in pairs.

Each pair runs the same `commbench sweep` (the default sweep, or the sweep arguments given after
`--`) once from the working tree and once from each ref, in an order that alternates from pair to
pair, so that a slow spell of the machine lands on both sides. Each ref is exported with
`git archive` into a temporary folder and imported through PYTHONPATH, from the same Python; each
run has its own temporary working folder, CSV and history file, so that no run reads another's
state (the ETA's prior, a results history). The temporary folders are deleted at the end.

Printed (markdown, to paste): every run's wall time and the ratio of the working tree's to each
ref's per pair, with the load average around each run; then the breakdown per tree (medians over
the pairs): the `# time:` line's categories where the tree prints it, and for every tree what can
be derived from outside: the process wall time, the rows and the timed work (the sum over rows of
iterations x mean time, from the CSV), the time before the first row and after the last one (the
rows' timestamps are whole seconds).

    python bench/sweep_time.py [--pairs 3] [--ref 01ee5cb] [--ref 63852f1] [-- SWEEP ARGS...]
    python bench/sweep_time.py --pairs 1 -- --op all_reduce -e 64K
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from commbench.benchkit import OTHER, PHASES, parse_time_line  # noqa: E402

WORKTREE = "tree"  # the working tree's name in the tables
DEFAULT_REF = "01ee5cb"  # the state before the default sweep got slower (63852f1 is the slow one)
RUN_TIMEOUT_S = 1800.0
CASE_COLUMNS = ("op", "variant", "phase", "dtype", "size_bytes", "status")


@dataclass
class Run:
    """One sweep: its tree, wall time, load average before and after, and what its outputs say."""

    tree: str
    pair: int
    wall_s: float
    code: int
    load: tuple[float, float]
    rows: int = 0
    timed_work_s: float = 0.0
    before_first_s: float = float("nan")
    after_last_s: float = float("nan")
    phases: dict[str, float] = field(default_factory=dict)  # the `# time:` line's, where printed
    line_wall_s: float = float("nan")
    cases: frozenset[tuple[str, ...]] = frozenset()  # (op, variant, phase, dtype, size_bytes, status) of every row


def export(ref: str, into: Path) -> Path:
    """The ref's files in `into` (git archive: no worktree, no checkout of the repository)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def run_one(tree: str, root: Path, pair: int, sweep_args: list[str], scratch: Path) -> Run:
    """One sweep from `root` in a fresh working folder of its own."""
    cwd = Path(tempfile.mkdtemp(prefix=f"{tree}-{pair}-", dir=scratch))
    out = cwd / "out.csv"
    env = {**os.environ, "PYTHONPATH": str(root), "COMMBENCH_HISTORY": str(cwd / "history.sqlite")}
    command = [sys.executable, "-m", "commbench", "sweep", *sweep_args, "-o", str(out)]
    load_before = load_average()
    began_epoch, began = time.time(), time.perf_counter()
    proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    wall = time.perf_counter() - began
    ended_epoch = began_epoch + wall
    run = Run(tree, pair, wall, proc.returncode, (load_before, load_average()))
    if proc.returncode not in (0, 1):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        print(f"# {tree} pair {pair}: exit {proc.returncode}: {' / '.join(tail)}", file=sys.stderr)
    for line in proc.stdout.splitlines():
        if (parsed := parse_time_line(line)) is not None:
            run.line_wall_s, run.phases = parsed
            print(f"#   {tree} {line}", flush=True)
    _read_rows(run, out, began_epoch, ended_epoch)
    return run


def _read_rows(run: Run, out: Path, began_epoch: float, ended_epoch: float) -> None:
    """Rows, timed work and the time before the first and after the last row, from the CSV."""
    if not out.exists():
        return
    with out.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    stamps = []
    run.cases = frozenset(tuple(row.get(k, "") for k in CASE_COLUMNS) for row in rows)
    for row in rows:
        run.rows += 1
        with contextlib.suppress(KeyError, ValueError):  # an unavailable row: no samples
            run.timed_work_s += int(row["iters"]) * float(row["time_us_mean"]) * 1e-6
        if row.get("timestamp"):
            stamps.append(datetime.datetime.fromisoformat(row["timestamp"]).timestamp())
    if stamps:
        run.before_first_s = min(stamps) - began_epoch
        # A timestamp is rounded down to the second: the row was written up to a second later.
        run.after_last_s = ended_epoch - (max(stamps) + 0.5)


def median(values: list[float]) -> float:
    kept = [v for v in values if v == v]
    return statistics.median(kept) if kept else float("nan")


def seconds(value: float, wall: float | None = None) -> str:
    if value != value:
        return "-"
    return f"{value:.1f} s" + (f" ({100 * value / wall:.0f}%)" if wall else "")


# The timed share three ways, each of the process wall time (docs/measurement.md says why three):
# the samples alone (the CSV), the timed blocks with each sample's barrier (`# time: timed`), and
# those with warm-up, whose samples are timed the same way but not kept.
TIMED_SHARES: list[tuple[str, bool, Callable[[Run], float]]] = [
    ("the samples alone (CSV: iters x mean)", False, lambda r: r.timed_work_s / r.wall_s),
    (
        "the timed blocks, each sample's barrier included (`# time:` timed)",
        True,
        lambda r: _phase(r, "timed") / r.wall_s,
    ),
    (
        "the timed blocks and warm-up (`# time:` timed + warmup)",
        True,
        lambda r: (_phase(r, "timed") + _phase(r, "warmup")) / r.wall_s,
    ),
]


def _phase(run: Run, name: str) -> float:
    return run.phases.get(name, float("nan"))


def print_pairs(runs: list[Run], trees: list[str]) -> None:
    refs = [t for t in trees if t != WORKTREE]
    head = ["pair", *(f"{t} (s)" for t in trees), *(f"{WORKTREE}/{r}" for r in refs), "load before-after"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for pair in sorted({r.pair for r in runs}):
        by = {r.tree: r for r in runs if r.pair == pair}
        walls = [f"{by[t].wall_s:.1f}" + ("" if by[t].code in (0, 1) else f" (exit {by[t].code})") for t in trees]
        ratios = [f"{by[WORKTREE].wall_s / by[r].wall_s:.2f}" for r in refs]
        loads = ", ".join(f"{by[t].load[0]:.2f}-{by[t].load[1]:.2f}" for t in trees)
        print("| " + " | ".join([str(pair), *walls, *ratios, loads]) + " |")


def print_breakdown(runs: list[Run], trees: list[str]) -> None:
    """Medians over the pairs: the `# time:` categories, then what the CSV and the clock outside say."""
    print()
    print("| median over pairs | " + " | ".join(trees) + " |")
    print("|---|" + "---|" * len(trees))
    walls = {t: median([r.wall_s for r in runs if r.tree == t]) for t in trees}

    def line(label: str, value: callable) -> None:
        cells = [seconds(median([value(r) for r in runs if r.tree == t]), walls[t]) for t in trees]
        print(f"| {label} | " + " | ".join(cells) + " |")

    print("| process wall time | " + " | ".join(seconds(walls[t]) for t in trees) + " |")
    print("| rows | " + " | ".join(f"{median([r.rows for r in runs if r.tree == t]):.0f}" for t in trees) + " |")
    reference = next((r.cases for r in runs if r.tree == WORKTREE), frozenset())
    same = ["yes" if all(r.cases == reference for r in runs if r.tree == t) else "no" for t in trees]
    print("| the same cases and statuses as the tree's first run | " + " | ".join(same) + " |")
    line("timed work (CSV: sum of iters x mean)", lambda r: r.timed_work_s)
    line("before the first row (CSV timestamps)", lambda r: r.before_first_s)
    line("after the last row: charts, teardown (CSV timestamps)", lambda r: r.after_last_s)
    printed = {t: any(r.phases for r in runs if r.tree == t) for t in trees}
    for name in [*PHASES, OTHER]:
        cells = []
        for t in trees:
            if not printed[t]:
                cells.append("no `# time:` line")
                continue
            cells.append(seconds(median([r.phases.get(name, float("nan")) for r in runs if r.tree == t]), walls[t]))
        print(f"| `# time:` {name} | " + " | ".join(cells) + " |")
    if any(printed.values()):
        line_walls = " | ".join(
            seconds(median([r.line_wall_s for r in runs if r.tree == t])) if printed[t] else "-" for t in trees
        )
        print(f"| `# time:` wall (from the CLI's import) | {line_walls} |")
        outside = " | ".join(
            seconds(median([r.wall_s - r.line_wall_s for r in runs if r.tree == t]), walls[t]) if printed[t] else "-"
            for t in trees
        )
        print(f"| outside the line: the interpreter's start and exit | {outside} |")
    for label, from_line, share in TIMED_SHARES:
        cells = [
            f"{100 * median([share(r) for r in runs if r.tree == t]):.0f}%" if printed[t] or not from_line else "-"
            for t in trees
        ]
        print(f"| timed share: {label} | " + " | ".join(cells) + " |")
    print()
    print(
        "Shares are of the process wall time. `# time:` warmup is the untimed warm-up samples (each"
        " with its barrier, as a timed one); timed is the timed blocks' loops, every sample's untimed"
        " synchronise and barrier included; the CSV's timed work is the samples alone. A tree without"
        " the line gets only the CSV-derived lines."
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=3, help="interleaved rounds of one run per tree (default 3)")
    parser.add_argument(
        "--ref", action="append", default=None, help=f"git ref to compare against, repeatable (default {DEFAULT_REF})"
    )
    parser.add_argument("sweep_args", nargs="*", help="after --: the sweep's arguments (default: the default sweep)")
    args = parser.parse_args()
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")
    refs = args.ref or [DEFAULT_REF]
    for ref in refs:
        if (
            subprocess.run(
                ["git", "-C", str(REPO), "rev-parse", "--verify", "-q", f"{ref}^{{commit}}"], capture_output=True
            ).returncode
            != 0
        ):
            parser.error(f"{ref!r} is no commit of {REPO}; give --ref a commit, branch or tag")
    scratch = Path(tempfile.mkdtemp(prefix="sweep-time-"))
    try:
        roots = {WORKTREE: REPO, **{ref: export(ref, scratch / f"ref-{ref}") for ref in refs}}
        trees = list(roots)
        print(
            f"# sweep: commbench sweep {' '.join(args.sweep_args) or '(defaults)'}; {args.pairs} pairs; "
            f"{os.cpu_count()} cores; load {Path('/proc/loadavg').read_text().strip()}"
        )
        runs: list[Run] = []
        for pair in range(1, args.pairs + 1):
            order = trees if pair % 2 else trees[::-1]  # alternate who goes first
            for tree in order:
                run = run_one(tree, roots[tree], pair, args.sweep_args, scratch)
                print(
                    f"# pair {pair} {tree}: {run.wall_s:.1f} s, exit {run.code}, {run.rows} rows, "
                    f"load {run.load[0]:.2f}-{run.load[1]:.2f}",
                    flush=True,
                )
                runs.append(run)
        print()
        print_pairs(runs, trees)
        print_breakdown(runs, trees)
        failed = [r for r in runs if r.code not in (0, 1)]
        return 1 if failed else 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
