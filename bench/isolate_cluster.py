"""`commbench isolate` on namespace clusters: the adaptive and the all-pairs screen side by side.

--case 8x1: 8 hosts of 1 rank; --case 4x2: 4 hosts of 2 ranks, each host with two interfaces on
two bridges (one per rail), local rank g bound to eth<g> (--rails eth0,eth1). Every host is
shaped to the tests' healthy rate both ways (tbf); each run then puts one fault at random (seeded
by --seed): a host at a quarter of the rate on every rail, a link between two hosts at a quarter
(htb), or (4x2) one host's rail at a quarter, and runs both screens on it, one after the other,
in an order that alternates from run to run. For each: the verdict, whether it named the fault
and nothing else, the host-pair rounds (screen and confirmation), the wall time of those rounds
(the slowest rank's, summed) and of the whole launch, and the load average beside it. Writes the
chart of the last run's adaptive verdict to --chart. Needs root.

--cpu instead runs --runs runs as docs/isolate.md launches them (one torchrun node per host,
OMP_NUM_THREADS unset), every host healthy and the third under a CPU quota of CPU_QUOTA.

    sudo python bench/isolate_cluster.py --case 8x1 [--runs 10] [--seed 1] [--chart PNG]
    sudo python bench/isolate_cluster.py --case 4x2 [--runs 10]
    sudo python bench/isolate_cluster.py --cpu [--runs 3] [--chart docs/isolate-cpu.png]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from commbench.benchkit import draw
from tests.isolate.test_isolate_hosts import CPU_QUOTA, FABRIC, HEALTHY, RAILED, SLOW, Fabric, verdict_lines
from tests.test_two_hosts import netns_unavailable

CASES = {"8x1": (FABRIC, ("host", "link")), "4x2": (RAILED, ("host", "link", "rail"))}
SCREENS = ("adaptive", "all-pairs")


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def put_fault(fabric: Fabric, kind: str, rng: random.Random) -> set[tuple]:
    """Every host healthy, then the fault: what an exact verdict names."""
    hosts = fabric.hosts
    fabric.shape(hosts)
    if kind == "host":
        host = rng.choice(hosts)
        fabric.sh("slow", host, SLOW)
        return {("host", host)}
    if kind == "rail":
        host, rail = rng.choice(hosts), rng.randrange(fabric.rails)
        fabric.sh("slow", host, SLOW, str(rail))
        return {("rail", host, rail)}
    a, b = sorted(rng.sample(hosts, 2), key=hosts.index)
    fabric.sh("link", a, b, SLOW, HEALTHY)
    return {("link", a, b)}


def named(verdict) -> set[tuple]:  # type: ignore[no-untyped-def]
    return (
        {("host", h) for h in verdict.flagged_hosts}
        | {("link", a, b) for a, b in verdict.flagged_links}
        | {("rail", r.host, r.rail) for r in verdict.flagged_rails}
        | {("rank", r) for r in verdict.flagged_ranks}
    )


def compare(case: str, runs: int, seed: int, chart: Path | None) -> None:
    fabric, kinds = CASES[case]
    rng = random.Random(seed)
    extra = ["--rails", ",".join(f"eth{g}" for g in range(fabric.rails))] if fabric.rails > 1 else []
    results: dict[str, list[tuple[bool, bool, int, float, float]]] = {s: [] for s in SCREENS}
    ratios: list[tuple[float, float]] = []
    print(f"# {case}: {fabric.size} hosts x {fabric.rails} rank(s), healthy {HEALTHY}, fault {SLOW}; seed {seed}")
    print("| run | fault | load | screen | verdict | exact | rounds (screen+confirm) | rounds s | wall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    try:
        fabric.up()
        with tempfile.TemporaryDirectory() as tmp:
            for run in range(runs):
                expected = put_fault(fabric, rng.choice(kinds), rng)
                order = SCREENS if run % 2 == 0 else SCREENS[::-1]
                times = {}
                for screen in order:
                    out = Path(tmp) / f"{screen}-{run}.csv"
                    start = time.perf_counter()
                    _, verdict, text = fabric.isolate(
                        fabric.hosts, out, "--screen", screen, *extra, per_host=fabric.rails
                    )
                    wall = time.perf_counter() - start
                    found = named(verdict)
                    rounds_s = sum(verdict.round_seconds)
                    times[screen] = (rounds_s, wall)
                    results[screen].append(
                        (found == expected, bool(found - expected), verdict.rounds_used, rounds_s, wall)
                    )
                    shown = ", ".join(" ".join(map(str, f)) for f in sorted(found, key=str)) or "nothing"
                    print(
                        f"| {run + 1} | {' '.join(map(str, next(iter(expected))))} | {load()} | {screen} | {shown} | "
                        f"{'yes' if found == expected else 'NO'} | {verdict.rounds_used} ({verdict.rounds.screen}+"
                        f"{verdict.rounds.confirmation}) | {rounds_s:.1f} | {wall:.1f} |",
                        flush=True,
                    )
                    if found != expected:
                        print(verdict_lines(text), file=sys.stderr)
                    if chart is not None and screen == "adaptive" and run == runs - 1:
                        print(f"# chart: {draw(verdict, chart, overwrite=True)}")
                ratios.append(
                    (times["adaptive"][0] / times["all-pairs"][0], times["adaptive"][1] / times["all-pairs"][1])
                )
    finally:
        fabric.down()
    print()
    for screen in SCREENS:
        rows = results[screen]
        print(
            f"# {screen}: exact {sum(r[0] for r in rows)}/{runs}, false alarms {sum(r[1] for r in rows)}/{runs}, "
            f"rounds median {statistics.median(r[2] for r in rows)}, rounds' wall time median "
            f"{statistics.median(r[3] for r in rows):.1f} s, launch median {statistics.median(r[4] for r in rows):.1f} s"
        )
    print(
        f"# adaptive / all-pairs, side by side in each run: rounds' wall time median "
        f"{statistics.median(r[0] for r in ratios):.2f} (range {min(r[0] for r in ratios):.2f}-"
        f"{max(r[0] for r in ratios):.2f}), whole launch median {statistics.median(r[1] for r in ratios):.2f}; "
        f"load {load()}"
    )


def throttled(runs: int, chart: Path | None) -> None:
    """--cpu: runs with the third host under CPU_QUOTA, launched as the docs launch them."""
    hosts = FABRIC.hosts[:4]
    victim, named_, probe_s, retime_s = hosts[2], 0, [], []
    try:
        FABRIC.up()
        FABRIC.shape(hosts)
        FABRIC.sh("cpu", victim, CPU_QUOTA)
        with tempfile.TemporaryDirectory() as tmp:
            for run in range(runs):
                out = Path(tmp) / f"cpu-{run}.csv"
                start = time.perf_counter()
                code, verdict, text = FABRIC.isolate(hosts, out, torchrun=True, one_thread=False)
                wall = time.perf_counter() - start
                seconds = verdict.compute.seconds
                probe_s.append(seconds.probe)
                retime_s.append(seconds.retimings)
                named_ += hosts.index(victim) in verdict.flagged_ranks  # one rank per host
                print(f"=== run {run + 1} ({victim} at {CPU_QUOTA} of a CPU): exit {code}, {wall:.1f} s, load {load()}")
                print(verdict_lines(text))
                print(f"compute probe {seconds.probe:.2f} s, re-timings {seconds.retimings:.2f} s")
                if chart is not None and run == runs - 1:
                    print(f"chart: {draw(verdict, chart, overwrite=True)}")
    finally:
        FABRIC.down()
    print(f"\nthrottled rank named in {named_} of {runs} runs")
    print(
        f"compute probe (median of {runs}): {statistics.median(probe_s):.2f} s, "
        f"re-timings of its suspects {statistics.median(retime_s):.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=tuple(CASES), default="8x1")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--chart", type=Path, default=None)
    parser.add_argument("--cpu", action="store_true", help=f"one host under a CPU quota of {CPU_QUOTA}, via torchrun")
    opts = parser.parse_args()
    if (reason := netns_unavailable()) is not None:
        sys.exit(f"isolate_cluster: {reason}")
    if opts.cpu:
        throttled(opts.runs, opts.chart)
    else:
        compare(opts.case, opts.runs, opts.seed, opts.chart)


if __name__ == "__main__":
    main()
