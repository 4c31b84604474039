"""This machine's pair noise, measured for bench/isolate_sim.py: real `commbench isolate` runs on
namespace hosts, every host equal, and the spread of what they measured.

--hosts hosts in network namespaces (scripts/hosts.sh), each shaped to the tests' healthy rate,
one rank each, run --runs times with the all-pairs screen at the tests' settings. From every run's
host pairs at the bandwidth size it takes each pair's bandwidth over the run's median, and splits
that into the round's share (the median of the round's pairs: a burst on the machine slows a
whole round) and the pair's own (its bandwidth over its round's median). The simulator draws a
round's factor from the first and each pair's (on each rail) from the second: an empirical fit,
resampled, rather than a normal curve the measured tails do not follow. The compute probe's rates
over their median give the compute noise the same way, and each re-timing of a compute suspect the
probe cleared, its rate over its reference's, the noise of a re-timing beside a reference. Writes
--out (JSON), with the load average and the median wall time of a round, the simulator's time per
round. Needs root.

    sudo python bench/isolate_noise.py [--hosts 8] [--runs 5] [--out bench/isolate_noise.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.isolate.test_isolate_hosts import FABRIC, FAST, HEALTHY
from tests.test_two_hosts import netns_unavailable


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def factors(csv: Path) -> tuple[list[float], list[float]]:
    """A run's round factors (each round's median pair over the run's) and pair factors (each pair
    over its round's median), at the bandwidth size."""
    rows = pd.read_csv(csv)
    pairs = rows[(rows.kind == "host_pair") & (rows.size_bytes > rows.size_bytes.min())]
    run_median = pairs.busbw_gbps.median()
    by_round = pairs.groupby("round").busbw_gbps.median()
    pair = pairs.busbw_gbps / pairs["round"].map(by_round)
    return list(by_round / run_median), list(pair)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=8, choices=range(4, FABRIC.size + 1))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("isolate_noise.json"))
    opts = parser.parse_args()
    if (reason := netns_unavailable()) is not None:
        sys.exit(f"isolate_noise: {reason}")
    hosts = FABRIC.hosts[: opts.hosts]
    rounds, pairs, compute, retimes, round_s, loads = [], [], [], [], [], []
    try:
        FABRIC.up()
        FABRIC.shape(hosts)
        with tempfile.TemporaryDirectory() as tmp:
            for run in range(opts.runs):
                out = Path(tmp) / f"noise-{run}.csv"
                code, verdict, _ = FABRIC.isolate(hosts, out, "--screen", "all-pairs")
                loads.append(load())
                r, p = factors(out)
                rounds += r
                pairs += p
                median = statistics.median(verdict.compute.gflops.values())
                compute += [v / median for v in verdict.compute.gflops.values()]
                cleared = [str(r) for r in verdict.compute.suspects if r not in verdict.compute.flagged]
                retimes += [s / ref for r in cleared for s, ref in verdict.compute.beside_gflops[r]]
                round_s += verdict.round_seconds[: verdict.rounds.screen]
                print(
                    f"run {run + 1}: exit {code}, flagged {verdict.flagged}, rounds {verdict.rounds_used}, "
                    f"median round {statistics.median(verdict.round_seconds):.2f} s, load {loads[-1]}",
                    flush=True,
                )
    finally:
        FABRIC.down()
    fit = {
        "source": (
            f"{opts.runs} runs of commbench isolate --screen all-pairs on {opts.hosts} namespace hosts, each at "
            f"{HEALTHY} both ways (tbf), 1 rank per host, {' '.join(FAST)}; load average {', '.join(loads)}"
        ),
        "round_seconds_median": statistics.median(round_s),
        "pairs_per_round": opts.hosts // 2,
        "round_factors": sorted(rounds),
        "pair_factors": sorted(pairs),
        "compute_factors": sorted(compute),
        "retime_ratios": sorted(retimes),
    }
    opts.out.write_text(json.dumps(fit, indent=1))
    quantiles = statistics.quantiles(pairs, n=20)
    print(
        f"{len(pairs)} pairs in {len(rounds)} rounds: pair factor 5% {quantiles[0]:.3f}, median "
        f"{statistics.median(pairs):.3f}, 95% {quantiles[-1]:.3f}, min {min(pairs):.3f}; round factor "
        f"{min(rounds):.3f} to {max(rounds):.3f}; compute factor {min(compute):.3f} to {max(compute):.3f}; "
        f"{len(retimes)} re-timings, ratio {min(retimes, default=1):.2f} to {max(retimes, default=1):.2f}; "
        f"median round {fit['round_seconds_median']:.2f} s; written to {opts.out}"
    )


if __name__ == "__main__":
    main()
