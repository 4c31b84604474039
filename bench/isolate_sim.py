"""`commbench isolate`'s screens and verdict at 64 to 8,192 hosts, on a simulated cluster.

The screens, the suspects, the confirmation with its passes and widening, the rails and the
compute judge are commbench's own (commbench.benchkit: screen_level, judge_compute, the screens),
run against a synthetic cluster (tests/support/synthetic_cluster.py): rates per host, per rail
and per link, a pair's bandwidth on rail g the slower end's rate times the link's factor times
noise. The noise is this machine's, measured by bench/isolate_noise.py on namespace hosts: a
round's factor and each pair's (on each rail) are drawn from the measured ones, with replacement.

For each host count and fault kind, --trials trials with the fault put at random: the host-pair
rounds the screen and its confirmations used, the trials whose verdict named the fault and
nothing else (exact), the trials that named something that was not at fault (false alarms), and
the wall time projected at this machine's time per round (from the noise file), against the
all-pairs screen's (N-1 rounds and its confirmations; simulated where --all-pairs-up-to allows,
else N-1 rounds alone, which flatters it). The simulator's own wall time is printed at the end.

    python bench/isolate_sim.py [--hosts 64,1024,8192] [--trials 100] [--rails 2] [--all-pairs-up-to 64]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from commbench.benchkit import (
    DEFAULT_THRESHOLD,
    NOISE_K,
    Adaptive,
    AllPairs,
    Level,
    circle_count,
    judge_compute,
    screen_level,
)
from tests.support.synthetic_cluster import SyntheticCluster

NOISE_FILE = Path(__file__).with_name("isolate_noise.json")


@dataclass(frozen=True)
class Measured:
    """This machine's noise: factors to draw from, and its time per round."""

    rounds: np.ndarray
    pairs: np.ndarray
    compute: np.ndarray
    retimes: np.ndarray
    round_s: float
    source: str

    @classmethod
    def read(cls, path: Path) -> Measured:
        fit = json.loads(path.read_text())
        return cls(
            np.array(fit["round_factors"]),
            np.array(fit["pair_factors"]),
            np.array(fit["compute_factors"]),
            np.array(fit["retime_ratios"] or [1.0]),
            fit["round_seconds_median"],
            fit["source"],
        )

    def noise(self, rng: np.random.Generator, shape: tuple[int, int], round_index: int) -> np.ndarray:
        return rng.choice(self.rounds) * rng.choice(self.pairs, shape)

    def compute_noise(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.choice(self.compute, n)

    def retime(self, cluster: SyntheticCluster, rng: np.random.Generator) -> Callable[[int, int], tuple[float, float]]:
        """A re-timing beside a reference as this machine's showed them: the two rates' measured ratio."""

        def again(rank: int, reference: int) -> tuple[float, float]:
            return cluster.compute.get(rank, 1.0) * float(rng.choice(self.retimes)), cluster.compute.get(reference, 1.0)

        return again


@dataclass(frozen=True)
class Fault:
    """What a trial breaks, and the threshold it is judged at."""

    name: str
    put: Callable[[SyntheticCluster, np.random.Generator], set[tuple]]
    threshold: float = DEFAULT_THRESHOLD


def _hosts(factor: float, count: int = 1) -> Callable[[SyntheticCluster, np.random.Generator], set[tuple]]:
    def put(cluster: SyntheticCluster, rng: np.random.Generator) -> set[tuple]:
        chosen = rng.choice(cluster.hosts, count, replace=False)
        cluster.host_rate[chosen] = factor
        return {("host", f"h{h}") for h in chosen}

    return put


def _link(cluster: SyntheticCluster, rng: np.random.Generator) -> set[tuple]:
    a, b = sorted(int(h) for h in rng.choice(cluster.hosts, 2, replace=False))
    cluster.links[(a, b)] = 0.5
    return {("link", f"h{a}", f"h{b}")}


def _rail(cluster: SyntheticCluster, rng: np.random.Generator) -> set[tuple]:
    host, rail = int(rng.integers(cluster.hosts)), int(rng.integers(cluster.rails))
    cluster.rail_rate[host, rail] = 0.5
    return {("rail", f"h{host}", rail)}


def _compute(cluster: SyntheticCluster, rng: np.random.Generator) -> set[tuple]:
    rank = int(rng.integers(cluster.hosts * cluster.rails))
    cluster.compute[rank] = 0.5
    return {("rank", rank)}


FAULTS = [
    Fault("none", lambda cluster, rng: set()),
    Fault("none (threshold 10%)", lambda cluster, rng: set(), 0.10),
    Fault("host 0.5x", _hosts(0.5)),
    Fault("host 0.8x (threshold 10%)", _hosts(0.8), 0.10),
    Fault("2 hosts 0.5x", _hosts(0.5, 2)),
    Fault("3 hosts 0.5x", _hosts(0.5, 3)),
    Fault("4 hosts 0.5x", _hosts(0.5, 4)),
    Fault("link 0.5x", _link),
    Fault("rail 0.5x", _rail),
    Fault("compute 0.5x", _compute),
]


def trial(
    hosts: int, rails: int, fault: Fault, seed: int, measured: Measured, all_pairs: bool
) -> tuple[bool, bool, int, bool]:
    """One simulated run: (exact, false alarm, host-pair rounds, the faulty link's pair was met).
    The network faults are judged on the screen's verdict, the compute straggler on the compute
    judge's (it probes every rank at once, whatever the screen)."""
    cluster = SyntheticCluster(hosts, rails, measured.noise, seed, measured.compute_noise)
    rng = np.random.default_rng(seed + 1)
    expected = fault.put(cluster, rng)
    level = Level("host", list(range(hosts)), lambda h: f"h{h}")
    screen = AllPairs(hosts) if all_pairs else Adaptive(hosts, seed)
    screened = screen_level(level, screen, cluster.measure, fault.threshold, NOISE_K)
    found = screened.findings
    named = (
        {("host", h) for h in found.flagged}
        | {("link", a, b) for a, b in found.flagged_links}
        | {("rail", r.host, r.rail) for r in found.flagged_rails}
    )
    if fault.put is _compute:
        judged = judge_compute(cluster.compute_rates(), measured.retime(cluster, rng), fault.threshold)
        named |= {("rank", r) for r in judged.flagged}
    met = {(m.a, m.b) for m in found.pairs}
    covered = all((e[1], e[2]) in met for e in expected if e[0] == "link")
    return named == expected, bool(named - expected), screened.screen_rounds + screened.confirmation_rounds, covered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="64,1024,8192")
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--rails", type=int, default=2, help="rails (NICs, local ranks) per host")
    parser.add_argument("--all-pairs-up-to", type=int, default=64, help="simulate all-pairs up to this many hosts")
    parser.add_argument("--all-pairs-trials", type=int, default=None, help="trials of all-pairs (default --trials)")
    parser.add_argument("--noise", type=Path, default=NOISE_FILE)
    parser.add_argument("--faults", default=None, help="comma-separated fault names (default: all)")
    opts = parser.parse_args()
    if not opts.noise.exists():
        sys.exit(
            f"isolate_sim: no {opts.noise}; measure this machine's noise first: sudo python bench/isolate_noise.py"
        )
    measured = Measured.read(opts.noise)
    faults = [f for f in FAULTS if opts.faults is None or f.name in opts.faults.split(",")]
    began = time.perf_counter()
    print(f"# noise: {measured.source}; {measured.round_s:.2f} s per round here")
    print(f"# {opts.rails} rails per host; adaptive: {opts.trials} trials per cell; load {_load()}")
    print(
        "| hosts | fault | screen | rounds (mean, max) | exact | false alarms | link met | projected min | all-pairs: rounds, exact, false alarms, min |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for hosts in (int(n) for n in opts.hosts.split(",")):
        for fault in faults:
            cell = time.perf_counter()
            adaptive = [trial(hosts, opts.rails, fault, s, measured, False) for s in range(opts.trials)]
            reference = ""
            if hosts <= opts.all_pairs_up_to:
                n = opts.all_pairs_trials or opts.trials
                every = [trial(hosts, opts.rails, fault, s, measured, True) for s in range(n)]
                rounds = statistics.fmean(t[2] for t in every)
                reference = (
                    f"{rounds:.1f}, {sum(t[0] for t in every)}/{n}, {sum(t[1] for t in every)}/{n}, "
                    f"{rounds * measured.round_s / 60:.1f}"
                )
            else:
                rounds = circle_count(hosts)
                reference = f">= {rounds} (not simulated), -, -, >= {rounds * measured.round_s / 60:.1f}"
            mean = statistics.fmean(t[2] for t in adaptive)
            links = f"{sum(t[3] for t in adaptive)}/{opts.trials}" if fault.name.startswith("link") else "-"
            print(
                f"| {hosts} | {fault.name} | adaptive | {mean:.1f}, {max(t[2] for t in adaptive)} "
                f"(target {3 * math.log2(hosts) + 6:.0f}) | {sum(t[0] for t in adaptive)}/{opts.trials} | "
                f"{sum(t[1] for t in adaptive)}/{opts.trials} | {links} | {mean * measured.round_s / 60:.2f} | "
                f"{reference} |",
                flush=True,
            )
            print(f"#   ({time.perf_counter() - cell:.1f} s for this cell)", file=sys.stderr, flush=True)
    print(f"# simulator wall time {time.perf_counter() - began:.0f} s, load {_load()}")


def _load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


if __name__ == "__main__":
    main()
