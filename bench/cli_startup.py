"""Is `commbench --help` slower than in another checkout? Both timed in turn, in one run.

`commbench --help` imports the CLI, the op registry and every op module (their options are flags),
so it is where a change of imports or layers shows as startup time. Each round runs `python -m
commbench --help` once from this checkout and once from the other (`--against`, e.g. a worktree of
main), each going first in every other round, so that both see the same load; each run is timed as
wall seconds and as the CPU seconds (user + system) the child used, which a busy machine disturbs
less. Reported: the medians, the ratios this / other, and how many commbench modules each imports.

    python bench/cli_startup.py --against ../main [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOADED = (
    "import sys; from click.testing import CliRunner; from commbench.cli import main; "
    "CliRunner().invoke(main, ['--help']); print(sum(m.startswith('commbench') for m in sys.modules), 'torch' in sys.modules)"
)


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree)}


def one_run(tree: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one `python -m commbench --help` importing the tree's commbench."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "commbench", "--help"], env=_env(tree), cwd=tree, check=True, stdout=subprocess.DEVNULL
    )
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def loaded(tree: Path) -> str:
    """How many commbench modules `--help` imports, and whether torch is among the modules loaded."""
    proc = subprocess.run(
        [sys.executable, "-c", LOADED], env=_env(tree), cwd=tree, check=True, capture_output=True, text=True
    )
    count, torch = proc.stdout.split()
    return f"{count} commbench modules, torch {'loaded' if torch == 'True' else 'not loaded'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, required=True, help="the other checkout's root folder")
    parser.add_argument("--runs", type=int, default=5, help="runs of each checkout (default 5)")
    args = parser.parse_args()
    other = args.against.resolve()
    if not (other / "commbench" / "cli").is_dir():
        sys.exit(f"cli_startup: {other} holds no commbench/cli; give a checkout's root folder")
    trees = {"this": REPO, "other": other}
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
    for round_index in range(max(1, args.runs)):
        order = list(trees.items())
        for name, tree in order if round_index % 2 == 0 else order[::-1]:  # neither always goes first
            times[name].append(one_run(tree))
    medians = {name: [statistics.median(t[i] for t in runs) for i in (0, 1)] for name, runs in times.items()}
    for name, tree in trees.items():
        wall, cpu = medians[name]
        print(f"{name:5} {tree}: median wall {wall:.3f} s, CPU {cpu:.3f} s over {args.runs} runs; {loaded(tree)}")
    ratio = [medians["this"][i] / medians["other"][i] for i in (0, 1)]
    print(f"this / other: wall {ratio[0]:.3f}, CPU {ratio[1]:.3f}")


if __name__ == "__main__":
    main()
