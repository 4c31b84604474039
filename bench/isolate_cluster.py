"""`commbench isolate` on a namespace cluster: verdicts, false alarms, time per round, and a projection.

N hosts in network namespaces on a bridge (scripts/hosts.sh), every one shaped to --healthy both
ways with tbf. --runs runs with one host at a quarter of that rate, then --runs runs with every
host equal. Reports each run's verdict, the false alarms over the equal runs, the wall time of a
round of concurrent pair exchanges (the median over every round of every run) and of everything
else in a run, and projects a sweep of 8, 64 and 1024 hosts from them. Writes the host matrix chart
of the last run with a slow host to --chart. Needs root.

--cpu instead runs --runs runs as docs/isolate.md launches them (one torchrun node per host,
OMP_NUM_THREADS unset), every host at --healthy and the third one under a CPU quota of CPU_QUOTA
(scripts/hosts.sh cpu): each run's verdict, whether the throttled rank was named, and the compute
probe's wall time (the probe of every rank at once, and the re-timings of its suspects).

    sudo python bench/isolate_cluster.py [--hosts 4] [--runs 5] [--chart docs/isolate-matrix.png]
    sudo python bench/isolate_cluster.py --cpu [--runs 3] [--chart docs/isolate-cpu.png]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from commbench.benchkit import circle_rounds, draw
from tests.isolate.test_isolate_hosts import CPU_QUOTA, HEALTHY, HOSTS, SLOW, hosts_sh, isolate, shape, verdict_lines
from tests.test_two_hosts import netns_unavailable

PROJECTED_HOSTS = (8, 64, 1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=4, choices=range(2, len(HOSTS) + 1))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--chart", type=Path, default=None)
    parser.add_argument("--cpu", action="store_true", help=f"one host under a CPU quota of {CPU_QUOTA}, via torchrun")
    opts = parser.parse_args()
    if (reason := netns_unavailable()) is not None:
        sys.exit(f"isolate_cluster: {reason}")
    hosts = HOSTS[: opts.hosts]
    if opts.cpu:
        throttled(hosts, opts.runs, opts.chart)
        return
    rounds_s, other_s, alarms, hits = [], [], 0, 0
    try:
        hosts_sh("up", str(len(HOSTS)))
        with tempfile.TemporaryDirectory() as tmp:
            for slow in (hosts[-1], None):
                shape(hosts, slow=slow)
                for run in range(opts.runs):
                    out = Path(tmp) / f"{slow}-{run}.csv"
                    start = time.perf_counter()
                    code, verdict, text = isolate(hosts, out)
                    wall = time.perf_counter() - start
                    rounds_s += verdict["round_seconds"]
                    other_s.append(wall - sum(verdict["round_seconds"]))
                    flagged = verdict["flagged_hosts"] + verdict["flagged_links"] + verdict["flagged_ranks"]
                    what = f"slow {slow} at {SLOW}, others at {HEALTHY}" if slow else f"all at {HEALTHY}"
                    print(f"=== run {run + 1} ({what}): exit {code}, {wall:.1f} s\n{verdict_lines(text)}")
                    if slow is None:
                        alarms += bool(flagged)
                    else:
                        hits += flagged == [slow]
                        keys = ("hosts", "flagged_hosts", "flagged_links", "flagged_ranks")
                        print(json.dumps({k: verdict[k] for k in keys}))
                        if opts.chart is not None and run == opts.runs - 1:
                            print(f"chart: {draw(verdict, opts.chart)}")
    finally:
        hosts_sh("down")
    per_round, other = statistics.median(rounds_s), statistics.median(other_s)
    print(f"\nslow host named alone in {hits} of {opts.runs} runs; false alarms in {alarms} of {opts.runs} equal runs")
    print(
        f"wall time per round (median of {len(rounds_s)} rounds): {per_round:.2f} s; the rest of a run: {other:.1f} s"
    )
    print("projection (same size, iterations and per-pair rate; rounds = N-1, each as long as here):")
    print("| hosts | rounds | projected wall time |")
    print("|---|---|---|")
    for n in PROJECTED_HOSTS:
        rounds = len(circle_rounds(n))
        total = other + rounds * per_round
        print(f"| {n} | {rounds} | {total:.0f} s ({total / 60:.1f} min) |")


def throttled(hosts: list[str], runs: int, chart: Path | None) -> None:
    """--cpu: runs with hosts[2] under CPU_QUOTA, launched as the docs launch them."""
    victim, named, probe_s, retime_s = hosts[2], 0, [], []
    try:
        hosts_sh("up", str(len(HOSTS)))
        shape(hosts)
        hosts_sh("cpu", victim, CPU_QUOTA)
        with tempfile.TemporaryDirectory() as tmp:
            for run in range(runs):
                out = Path(tmp) / f"cpu-{run}.csv"
                start = time.perf_counter()
                code, verdict, text = isolate(hosts, out, torchrun=True, one_thread=False)
                wall = time.perf_counter() - start
                seconds = verdict["compute"]["seconds"]
                probe_s.append(seconds["probe"])
                retime_s.append(seconds["retimings"])
                rank = hosts.index(victim)  # one rank per host
                named += rank in verdict["flagged_ranks"]
                print(f"=== run {run + 1} ({victim} at {CPU_QUOTA} of a CPU): exit {code}, {wall:.1f} s")
                print(verdict_lines(text))
                print(f"compute probe {seconds['probe']:.2f} s, re-timings {seconds['retimings']:.2f} s")
                if chart is not None and run == runs - 1:
                    print(f"chart: {draw(verdict, chart)}")
    finally:
        hosts_sh("down")
    print(f"\nthrottled rank named in {named} of {runs} runs")
    print(
        f"compute probe (median of {runs}): {statistics.median(probe_s):.2f} s, "
        f"re-timings of its suspects {statistics.median(retime_s):.2f} s"
    )


if __name__ == "__main__":
    main()
