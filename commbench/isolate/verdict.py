"""How a node sweep reaches its verdicts: robust thresholds over scores, then confirmation.

Pure functions over measured numbers, so the rules can be tested on synthetic clusters.

The bar is set by the median and the MAD (median absolute deviation) of the scores, never by
their mean and standard deviation: one or several slow hosts must not drag the bar toward
themselves. A score is low when it falls below the median by more than both the threshold (a
share of the median, what the operator cares about) and k x 1.4826 x MAD (what the cluster's own
noise allows; 1.4826 x MAD estimates a standard deviation for normal noise). The median's
breakdown point is 50%, so fewer than half of the hosts may be slow and still be found.
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from commbench.results.stats import MAD_TO_SIGMA, mad

K = TypeVar("K", bound=Hashable)
Pair = tuple[int, int]

DEFAULT_THRESHOLD = 0.20
# 2 x 1.4826 x MAD: two standard deviations of normal noise. Lower than a bar that had to keep
# false alarms rare on its own (3 or 4) for two reasons: a suspect is only a suspect, re-measured
# alongside healthy pairs before anything is flagged, and with few hosts the MAD itself is
# uncertain (of 4 hosts, one noisy healthy host sets it), so at 3 a host at a quarter of the
# others' speed went unflagged on a loaded machine.
NOISE_K = 2.0


@dataclass(frozen=True)
class Bar:
    """The robust bar over a set of scores: values below `cut` are low."""

    median: float
    mad: float
    threshold: float
    k: float

    @property
    def margin(self) -> float:
        """How far below the median a score must fall to be low: the larger of the two bounds."""
        return max(self.threshold * self.median, self.k * MAD_TO_SIGMA * self.mad)

    @property
    def cut(self) -> float:
        return self.median - self.margin

    def low(self, value: float) -> bool:
        return self.median - value > self.margin


def robust_bar(values: Sequence[float], threshold: float = DEFAULT_THRESHOLD, k: float = NOISE_K) -> Bar:
    """The median and MAD of the values, and the rule that judges a value against them."""
    if not values:
        raise ValueError("a bar over no values")
    return Bar(statistics.median(values), mad(values), threshold, k)


def low_outliers(
    scores: Mapping[K, float], threshold: float = DEFAULT_THRESHOLD, k: float = NOISE_K
) -> tuple[Bar, list[K]]:
    """The bar over the scores and the keys whose scores are low, lowest first."""
    bar = robust_bar(list(scores.values()), threshold, k)
    return bar, sorted((key for key, s in scores.items() if bar.low(s)), key=lambda key: scores[key])


def upper_quartile(values: Sequence[float]) -> float:
    """The 75th percentile (linear interpolation): a node's score from its pairs' bandwidths.

    Not the median: a healthy node paired with several slow ones would score as slow. The upper
    quartile stays at the node's own speed while fewer than three quarters of its partners are
    slow, and one lucky pair does not lift it (as the maximum would).
    """
    ordered = sorted(values)
    pos = (len(ordered) - 1) * 0.75
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def node_scores(nodes: Sequence[int], pair_bw: Mapping[Pair, float]) -> dict[int, float]:
    """Each node's score from the bandwidths of the pairs it was in (nodes in no pair are left out)."""
    mine: dict[int, list[float]] = {n: [] for n in nodes}
    for (a, b), bw in pair_bw.items():
        mine[a].append(bw)
        mine[b].append(bw)
    return {n: upper_quartile(bws) for n, bws in mine.items() if bws}


def link_ratios(pair_bw: Mapping[Pair, float], scores: Mapping[int, float], slow: set[int]) -> dict[Pair, float]:
    """Each pair's bandwidth over what its two nodes reach elsewhere (the lower of their scores),
    for the pairs between nodes that are not slow themselves: a slow link is a low ratio."""
    return {
        (a, b): bw / min(scores[a], scores[b])
        for (a, b), bw in pair_bw.items()
        if a not in slow and b not in slow and min(scores[a], scores[b]) > 0
    }


@dataclass(frozen=True)
class Suspects:
    """The first pass over a set of pairs: node scores, link ratios, their bars and the suspects."""

    scores: dict[int, float]
    node_bar: Bar
    nodes: list[int]
    ratios: dict[Pair, float]
    link_bar: Bar | None
    links: list[Pair]


def suspects(
    nodes: Sequence[int], pair_bw: Mapping[Pair, float], threshold: float = DEFAULT_THRESHOLD, k: float = NOISE_K
) -> Suspects:
    """Slow nodes (every pair slow), then slow links (one pair slow between two nodes that are fine)."""
    scores = node_scores(nodes, pair_bw)
    node_bar, slow = low_outliers(scores, threshold, k)
    ratios = link_ratios(pair_bw, scores, set(slow))
    if len(ratios) >= 3:  # a bar needs a few pairs to say what normal is
        link_bar, links = low_outliers(ratios, threshold, k)
    else:
        link_bar, links = None, []
    return Suspects(scores, node_bar, slow, ratios, link_bar, links)


def ranked_healthy(scores: Mapping[int, float], slow: Collection[int]) -> list[int]:
    """The nodes judged healthy, best-scoring first: where a suspect's partners come from."""
    return sorted((n for n in scores if n not in slow), key=lambda n: (-scores[n], n))


def healthy_partners(healthy: Sequence[int], exclude: Collection[int], count: int, start: int = 0) -> list[int]:
    """Up to `count` of the healthy nodes (best first), none in `exclude`, from the start-th on
    (rotating the start spreads the confirmations over the healthy nodes)."""
    chosen: list[int] = []
    for j in range(len(healthy)):
        node = healthy[(start + j) % len(healthy)]
        if node not in exclude and node not in chosen:
            chosen.append(node)
            if len(chosen) == count:
                break
    return chosen


Passes = Sequence[Mapping[Pair, float]]  # each confirmation pass's measured pairs


def best_of(passes: Passes) -> dict[Pair, float]:
    """Each pair's best over the passes that measured it: interference only ever slows a pair."""
    best: dict[Pair, float] = {}
    for measured in passes:
        for pair, bw in measured.items():
            best[pair] = max(bw, best.get(pair, bw))
    return best


@dataclass(frozen=True)
class Confirmation:
    """What a suspect is re-measured with: the suspect pairs and the healthy reference pairs, all
    measured in the same confirmation phase, so that the machine's drift since the sweep cannot
    make or unmake a verdict. rounds: the pairs as they run, each suspect pair beside a reference
    pair in the same round where there are enough healthy nodes (the same moment's conditions)."""

    suspect_pairs: list[Pair]
    reference_pairs: list[Pair]
    rounds: list[list[Pair]]
    beside: list[Pair] = field(default_factory=list)  # each suspect pair's reference in its round, if any

    @property
    def pairs(self) -> list[Pair]:
        return self.suspect_pairs + self.reference_pairs

    def shares(self, passes: Passes) -> list[float]:
        """Each suspect pair's bandwidth as a share of its reference's: of the pair beside it in its
        round, in the same pass (a burst that slows the round slows both), the best share of the
        passes; where nothing ran beside it, its best over the slowest reference's best."""
        if self.beside:
            return [
                max((m[p] / m[r] for m in passes if p in m and r in m and m[r] > 0), default=0.0)
                for p, r in zip(self.suspect_pairs, self.beside)
            ]
        best = best_of(passes)
        slowest = min(best[p] for p in self.reference_pairs)
        return [best[p] / slowest if slowest > 0 else 0.0 for p in self.suspect_pairs]


def node_confirmation(suspect: int, healthy: Sequence[int], start: int = 0) -> Confirmation:
    """A suspect node s against healthy partners p and q, one round each, beside a reference pair
    in the same round: round 1 s-p and q-u, round 2 s-q and p-u (u a third healthy node), so each
    partner's own speed is in a reference and the two rounds run the suspect's pairs at once with
    them. With two healthy partners only, s-p, s-q and p-q (three rounds); with one, no reference."""
    partners = healthy_partners(healthy, (suspect,), 3, start)
    if len(partners) == 3:
        p, q, u = partners
        first, second = [_pair(suspect, p), _pair(q, u)], [_pair(suspect, q), _pair(p, u)]
        return Confirmation([first[0], second[0]], [first[1], second[1]], [first, second], [first[1], second[1]])
    mine = [_pair(suspect, p) for p in partners]
    reference = [_pair(partners[0], partners[1])] if len(partners) == 2 else []
    return Confirmation(mine, reference, [[pair] for pair in mine + reference])


def link_confirmation(a: int, b: int, healthy: Sequence[int], start: int = 0) -> Confirmation:
    """A suspect link a-b beside a reference pair c-d of healthy nodes in the same round, then a and
    b each with one of them (a-c, b-d): the link against the same moment's healthy pair and against
    what both its ends reach elsewhere."""
    others = healthy_partners(healthy, (a, b), 2, start)
    if not others:
        return Confirmation([_pair(a, b)], [], [[_pair(a, b)]])
    if len(others) == 1:
        c = others[0]
        return Confirmation([_pair(a, b)], [_pair(a, c), _pair(b, c)], [[_pair(a, b)], [_pair(a, c)], [_pair(b, c)]])
    c, d = others
    first, second = [_pair(a, b), _pair(c, d)], [_pair(a, c), _pair(b, d)]
    return Confirmation([first[0]], [first[1], *second], [first, second], [first[1]])


def _pair(a: int, b: int) -> Pair:
    return (a, b) if a < b else (b, a)


def confirmed_node(confirmation: Confirmation, passes: Passes, threshold: float, bar: Bar) -> bool:
    """A suspect stays slow when even its best re-measured pair, as a share of its reference, is
    below 1 - threshold (below the sweep's cut where there is no reference pair)."""
    if not confirmation.suspect_pairs:
        return False
    if not confirmation.reference_pairs:
        best = best_of(passes)
        return bar.low(max(best[p] for p in confirmation.suspect_pairs))
    return max(confirmation.shares(passes)) < 1 - threshold


def mixed_node(confirmation: Confirmation, passes: Passes, threshold: float) -> bool:
    """The suspect's re-measured pairs disagree: one below its reference by more than the
    threshold, another not. A slow node is slow with every partner; this is a link to one partner,
    or a burst during one round, and more pairs will tell."""
    if len(confirmation.suspect_pairs) < 2 or not confirmation.reference_pairs:
        return False
    return len({share < 1 - threshold for share in confirmation.shares(passes)}) == 2


def confirmed_link(confirmation: Confirmation, passes: Passes, threshold: float) -> bool:
    """A suspect link stays slow when it is below the healthy pair beside it in its round, in every
    pass, and its best below what both its ends reach with a healthy third node, by more than the
    threshold each time."""
    if not confirmation.reference_pairs:
        return False
    best = best_of(passes)
    link = best[confirmation.suspect_pairs[0]]
    ends = [p for p in confirmation.reference_pairs if p not in confirmation.beside]
    if confirmation.beside and max(confirmation.shares(passes)) >= 1 - threshold:
        return False
    return link < (1 - threshold) * min(best[p] for p in ends)
