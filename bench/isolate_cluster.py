"""`commbench isolate` on a namespace cluster: verdicts, false alarms, time per round, and a projection.

N hosts in network namespaces on a bridge (scripts/hosts.sh), every one shaped to --healthy both
ways with tbf. --runs runs with one host at a quarter of that rate, then --runs runs with every
host equal. Reports each run's verdict, the false alarms over the equal runs, the wall time of a
round of concurrent pair exchanges (the median over every round of every run) and of everything
else in a run, and projects a sweep of 8, 64 and 1024 hosts from them. Writes the host matrix chart
of the last run with a slow host to --chart. Needs root.

    sudo python bench/isolate_cluster.py [--hosts 4] [--runs 5] [--chart docs/isolate-matrix.png]
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
from commbench.isolate.report import draw
from commbench.isolate.schedule import circle_rounds
from tests.isolate.test_isolate_hosts import HEALTHY, HOSTS, SLOW, hosts_sh, isolate, shape, verdict_lines
from tests.test_two_hosts import netns_unavailable

PROJECTED_HOSTS = (8, 64, 1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=4, choices=range(2, len(HOSTS) + 1))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--chart", type=Path, default=None)
    opts = parser.parse_args()
    if (reason := netns_unavailable()) is not None:
        sys.exit(f"isolate_cluster: {reason}")
    hosts = HOSTS[: opts.hosts]
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


if __name__ == "__main__":
    main()
