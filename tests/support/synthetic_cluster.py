"""A cluster that exists only as rates: what isolate's judge and screens are tested on here, and
what bench/isolate_sim.py runs them against at 8,192 hosts. A pair's bandwidth on rail g is the
slower end's rate on that rail (its host's rate times its rail's), times the pair's link factor,
times noise; the noise is a callable, so a test can ask for none or a little and the simulator
for what this machine's measured pairs show."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

Pair = tuple[int, int]
# noise(rng, shape, round_index) -> multiplicative factors of that shape: a pair-by-rail draw, and
# whatever the model makes of the round (a burst that slows the round's every pair).
Noise = Callable[[np.random.Generator, tuple[int, int], int], np.ndarray]
# compute_noise(rng, n) -> n multiplicative factors of matmul rates.
ComputeNoise = Callable[[np.random.Generator, int], np.ndarray]


def no_noise(rng: np.random.Generator, shape: tuple[int, int], round_index: int) -> np.ndarray:
    return np.ones(shape)


def no_compute_noise(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.ones(n)


def uniform_compute(spread: float) -> ComputeNoise:
    def draw(rng: np.random.Generator, n: int) -> np.ndarray:
        return 1 + rng.uniform(-spread, spread, n)

    return draw


def uniform_noise(spread: float) -> Noise:
    """Every pair and rail within +-spread of its rate, independently."""

    def draw(rng: np.random.Generator, shape: tuple[int, int], round_index: int) -> np.ndarray:
        return 1 + rng.uniform(-spread, spread, shape)

    return draw


@dataclass
class SyntheticCluster:
    """hosts x rails, every rate 1.0 (GB/s) until a fault is set; `measure` is judge.Measure."""

    hosts: int
    rails: int = 1
    noise: Noise = no_noise
    seed: int = 0
    compute_noise: ComputeNoise = no_compute_noise
    host_rate: np.ndarray = field(init=False)
    rail_rate: np.ndarray = field(init=False)
    links: dict[Pair, float] = field(default_factory=dict)  # a pair's factor, on every rail
    compute: dict[int, float] = field(default_factory=dict)  # a rank's matmul rate, where not 1.0
    rounds: list[tuple[str, bool, int]] = field(default_factory=list)  # (label, confirming, pairs)

    def __post_init__(self) -> None:
        self.host_rate = np.ones(self.hosts)
        self.rail_rate = np.ones((self.hosts, self.rails))
        self.rng = np.random.default_rng(self.seed)

    def measure(self, pairs: Sequence[Pair], label: str, confirming: bool) -> dict[Pair, tuple[float, ...]]:
        """One round of pairs at once: each pair's bandwidth on each rail."""
        ends = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        a, b = ends[:, 0], ends[:, 1]
        rate = np.minimum(self.host_rate[a, None] * self.rail_rate[a], self.host_rate[b, None] * self.rail_rate[b])
        if self.links:
            rate *= np.array([self.links.get(p, 1.0) for p in pairs])[:, None]
        rate *= self.noise(self.rng, rate.shape, len(self.rounds))
        self.rounds.append((label, confirming, len(pairs)))
        return dict(zip(pairs, map(tuple, rate.tolist())))

    def compute_rates(self) -> dict[int, float]:
        """Every rank's matmul rate in a probe of all at once (healthy ones near 1.0), rank h * rails + g
        being local rank g of host h."""
        noise = self.compute_noise(self.rng, self.hosts * self.rails)
        return {r: self.compute.get(r, 1.0) * float(f) for r, f in enumerate(noise)}

    def retime(self, rank: int, reference: int) -> tuple[float, float]:
        """judge_compute's re-timing: a suspect's rate and its reference's, both timed alone."""
        noise = self.compute_noise(self.rng, 2)
        return self.compute.get(rank, 1.0) * float(noise[0]), self.compute.get(reference, 1.0) * float(noise[1])
