"""Screens: which hosts a node sweep measures together next, from what it has measured so far.

A screen proposes one round at a time (groups of hosts measured at once: pairs for the pair
screens, two halves for the bisection) from `Seen`, everything measured so far, or ends (None).
It is a pure function of what it has seen, so every rank, holding the same gathered results,
proposes the same round; the sweep measures it and asks again. The verdict (isolate/judge.py)
decides from the pairs; when it finds the evidence ambiguous it widens the screen (`Seen.widened`)
and asks for more rounds. A new pair screen is one class here and one line in SCREENS.

- all-pairs: the circle schedule, every pair once in N-1 rounds (N for odd N).
- adaptive (the default): ceil(log2 N) rounds of the circle schedule over the hosts in an order
  shuffled by the run's seed: perfect matchings in which every host meets a new partner each
  round, log2 N partners in all, enough to tell a host slow with everyone from a pair slow alone.
  Each widening adds as many rounds again, never past all pairs.
- bisect (--bisect): all_reduce over two halves at once, into the slower half while it is slower
  by more than the threshold, log2 N steps, for slowness only collectives show.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from commbench.isolate.schedule import circle_count, circle_round

Group = tuple[int, ...]  # hosts measured together: a pair, or a half of the bisection


@dataclass
class Seen:
    """What a screen has measured: each group's result (per rail, GB/s, for a pair; the all_reduce
    p50 in microseconds for a half), the rounds in order, and how often the verdict widened it."""

    hosts: int
    results: dict[Group, tuple[float, ...]] = field(default_factory=dict)
    rounds: list[list[Group]] = field(default_factory=list)
    widened: int = 0

    def add(self, groups: Sequence[Group], results: dict[Group, tuple[float, ...]]) -> None:
        self.rounds.append(list(groups))
        self.results.update(results)


class Screen(Protocol):
    """A schedule that proposes the next round from what it has seen, or ends (None)."""

    name: ClassVar[str]

    def next_round(self, seen: Seen) -> list[Group] | None: ...


class PairScreen(Screen, Protocol):
    """A screen of host pairs, made from the host count and the run's seed (SCREENS)."""

    @property
    def hosts(self) -> int: ...

    def plan(self) -> str:
        """What it will run, in words, for the run's first line."""
        ...


@dataclass(frozen=True)
class AllPairs:
    """Every pair of hosts once, N/2 pairs a round: N-1 rounds, and every link is measured."""

    hosts: int
    seed: int = 0
    name: ClassVar[str] = "all-pairs"

    @staticmethod
    def refusal(hosts: int) -> str | None:
        return None

    def plan(self) -> str:
        return f"{circle_count(self.hosts)} rounds of host pairs"

    def next_round(self, seen: Seen) -> list[Group] | None:
        done = len(seen.rounds)
        return circle_round(self.hosts, done) if done < circle_count(self.hosts) else None


@dataclass(frozen=True)
class Adaptive:
    """ceil(log2 N) rounds of new partners for every host, then as many again each time the verdict
    widens it, up to all pairs. The hosts' order is shuffled by the seed (the run's), so that runs
    one after another meet different pairs."""

    hosts: int
    seed: int = 0
    name: ClassVar[str] = "adaptive"

    @staticmethod
    def refusal(hosts: int) -> str | None:
        return None  # from 2 hosts (a host count that one round pairs wholly)

    @property
    def per_widening(self) -> int:
        return max(2, math.ceil(math.log2(self.hosts)))

    def plan(self) -> str:
        everything = circle_count(self.hosts)
        return f"{min(self.per_widening, everything)} rounds of host pairs, more while in doubt; all pairs take {everything}"

    def order(self) -> list[int]:
        hosts = list(range(self.hosts))
        random.Random(self.seed).shuffle(hosts)
        return hosts

    def next_round(self, seen: Seen) -> list[Group] | None:
        done = len(seen.rounds)
        wanted = min(self.per_widening * (1 + seen.widened), circle_count(self.hosts))
        if done >= wanted:
            return None
        order = self.order()
        return sorted(_pair(order[a], order[b]) for a, b in circle_round(self.hosts, done))


@dataclass(frozen=True)
class Bisect:
    """all_reduce over both halves of the remaining hosts at once, into the slower half while it is
    slower by more than `threshold`; ends when the halves are as fast or fewer than 4 hosts remain."""

    hosts: int
    threshold: float
    name: ClassVar[str] = "bisect"

    @staticmethod
    def refusal(hosts: int) -> str | None:
        return None if hosts >= 4 else f"--bisect needs 4 or more hosts to halve (got {hosts}); leave it out"

    def steps(self, seen: Seen) -> list[tuple[list[Group], tuple[float, float], str]]:
        """Each measured step: its halves, their p50s, and what it concluded."""
        out = []
        for halves in seen.rounds:
            times = (seen.results[halves[0]][0], seen.results[halves[1]][0])
            out.append((halves, times, self.conclusion(times)))
        return out

    def conclusion(self, times: tuple[float, float]) -> str:
        slower = 0 if times[0] > times[1] else 1
        if times[slower] <= times[1 - slower] * (1 + self.threshold):
            return "even: the halves are as fast"
        return f"half {slower + 1} is slower"

    def next_round(self, seen: Seen) -> list[Group] | None:
        remaining = list(range(self.hosts))
        for halves, times, result in self.steps(seen):
            if result.startswith("even"):
                return None
            slower = halves[0] if times[0] > times[1] else halves[1]
            remaining = list(slower) + ([remaining[-1]] if len(remaining) % 2 else [])
        if len(remaining) < 4:
            return None
        half = len(remaining) // 2
        return [tuple(remaining[:half]), tuple(remaining[half : 2 * half])]


def _pair(a: int, b: int) -> Group:
    return (a, b) if a < b else (b, a)


# The pair screens `--screen` names (its choices, IsolateOptions' check); the first is the default.
SCREENS: dict[str, type[AllPairs] | type[Adaptive]] = {Adaptive.name: Adaptive, AllPairs.name: AllPairs}
DEFAULT_SCREEN = next(iter(SCREENS))


def pair_screen(name: str, hosts: int, seed: int) -> PairScreen:
    """The pair screen called `name` over `hosts` hosts (IsolateOptions has checked the name)."""
    return SCREENS[name](hosts, seed)
