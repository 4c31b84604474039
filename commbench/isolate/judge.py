"""From measured pairs to a verdict: a screen's rounds, the suspects, their confirmation, the
rails, the compute stragglers. Nothing here measures: `Measure` runs a round of pairs (the ranks'
exchanges in a sweep, a synthetic cluster in bench/isolate_sim.py), so the same code judges both.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from commbench.isolate.findings import Cut, Evidence, LevelFindings, Measured, Rail, RailCheck
from commbench.isolate.schedule import pack
from commbench.isolate.screens import PairScreen, Seen
from commbench.isolate.verdict import (
    Bar,
    Confirmation,
    Passes,
    confirmed_link,
    confirmed_node,
    link_confirmation,
    low_outliers,
    mixed_node,
    node_confirmation,
    ranked_healthy,
    suspects,
)

Pair = tuple[int, int]
RailBw = tuple[float, ...]  # a pair's bandwidth on each rail (one value where rails are not judged)
CONFIRM_REPEATS = 2  # passes over a suspect, at the least
# A pass clears a healthy suspect unless noise slows its re-measured pair again, about as often as
# noise put a healthy pair of the screen below the bar: the share of suspect links among the pairs
# judged, shrunk toward PASS_NOISE_FLOOR as if PRIOR_PAIRS more pairs had shown that share (among a
# few pairs, one real slow link is a large share), and never below it. With many suspects (a large
# cluster, a noisy one), more passes keep the chance that any survives on noise alone below FALSE_ALARMS.
FALSE_ALARMS = 0.01
PASS_NOISE_FLOOR = 0.05
PRIOR_PAIRS = 100
MAX_PASSES = 6
# The re-timings of a compute suspect beside its reference: a rank still shares its cores with
# whatever else the host runs, so one slow re-timing is not enough to flag it.
COMPUTE_REPEATS = 3
# More suspects than this share of the nodes and the bar itself is in doubt: with few partners
# each, healthy hosts that met several slow ones score low too; more rounds dilute them.
CROWDED = 0.25


class Measure(Protocol):
    """One round of pairs, all at once: each pair's bandwidth per rail (GB/s)."""

    def __call__(self, pairs: Sequence[Pair], label: str, confirming: bool) -> dict[Pair, RailBw]: ...


@dataclass(frozen=True)
class Level:
    """Nodes whose pairs are judged together: hosts, or the ranks of each host (local pairs).
    group(n): the nodes n can be paired with are those of its group (every host: one group; a
    local rank: its host's)."""

    kind: str
    nodes: list[int]
    name: Callable[[int], str]
    group: Callable[[int], int] = lambda node: 0


@dataclass(frozen=True)
class Judged:
    """A level's findings, what left them in doubt, and the confirmation rounds they took."""

    findings: LevelFindings
    doubts: list[str]
    rounds: int


@dataclass(frozen=True)
class Screened:
    """The host level after its screen: the findings, the screen's rounds and the confirmations'."""

    findings: LevelFindings
    screen_rounds: int
    confirmation_rounds: int


def screen_level(level: Level, screen: PairScreen, measure: Measure, threshold: float, k: float) -> Screened:
    """The screen's rounds, then the verdict over every pair it met; while the verdict is in doubt
    and the screen can go on, it is widened (more rounds) and the verdict reached again."""
    seen = Seen(len(level.nodes))
    confirming, doubts = 0, []
    while True:
        while (pairs := screen.next_round(seen)) is not None:
            seen.add(pairs, measure(pairs, f"{screen.name} round {len(seen.rounds) + 1}", False))
        judged = judge_level(level, seen.results, measure, threshold, k)
        confirming += judged.rounds
        if not judged.doubts:
            break
        doubts += judged.doubts
        seen.widened += 1
        if screen.next_round(seen) is None:  # every pair met: the verdict stands as it is
            break
    return Screened(replace(judged.findings, doubts=doubts), len(seen.rounds), confirming)


@dataclass
class _Check:
    """A confirmation and the rule that says its suspect is still slow."""

    confirmation: Confirmation
    still_slow: Callable[[Passes], bool]
    slow: bool = True  # until a pass clears it


def judge_level(level: Level, bw: Mapping[Pair, RailBw], measure: Measure, threshold: float, k: float) -> Judged:
    """Suspects from the measured pairs, each re-measured beside healthy references (the best of
    its passes, passes_for() of them: interference only ever slows a pair, so a pass that clears a
    suspect ends its confirmation); the confirmed ones are flagged, as a rail where only some of
    its rails are slow."""
    t = threshold
    first = suspects(level.nodes, _slowest(bw), t, k)
    slow = set(first.nodes)

    healthy: dict[int, list[int]] = {}  # by group: the nodes judged healthy, best first
    for node in ranked_healthy(first.scores, slow):
        healthy.setdefault(level.group(node), []).append(node)

    def among(node: int) -> list[int]:  # the healthy nodes it can be paired with
        return healthy.get(level.group(node), [])

    nodes = {s: node_confirmation(s, among(s), 3 * i) for i, s in enumerate(first.nodes)}
    offset = 3 * len(first.nodes)  # links confirmed against other healthy nodes than the hosts' partners
    links = {p: link_confirmation(*p, among(p[0]), offset + 2 * i) for i, p in enumerate(first.links)}
    checks = {s: _Check(c, lambda b, c=c: confirmed_node(c, b, t, first.node_bar)) for s, c in nodes.items()}
    link_checks = {p: _Check(c, lambda b, c=c: confirmed_link(c, b, t)) for p, c in links.items()}
    # Each rail of a suspect's pairs is a chance for noise to keep it slow (a pair is its slowest rail).
    rail_count = len(next(iter(bw.values()), (0.0,)))
    noise = (len(first.links) + PASS_NOISE_FLOOR * PRIOR_PAIRS) / (len(first.ratios) + PRIOR_PAIRS)
    passes = passes_for((len(checks) + len(link_checks)) * rail_count, noise)
    seen, rounds = _confirm([*checks.values(), *link_checks.values()], measure, passes)
    best = _best(seen)
    measured = _slowest(best)
    rails = {s: rail_checks(c, seen, t) for s, c in nodes.items() if checks[s].slow}
    by_rail = {s: [r.rail for r in checks_ if r.slow] for s, checks_ in rails.items() if _some_rails(checks_)}
    flagged = [s for s in first.nodes if checks[s].slow and s not in by_rail]
    flagged_rails = [Rail(level.name(s), rail) for s, slow_rails in by_rail.items() for rail in slow_rails]
    flagged_links = [p for p in first.links if link_checks[p].slow]
    n = level.name

    def shown(pairs: list[Pair]) -> list[Measured]:
        return [Measured(n(a), n(b), measured[(a, b)]) for a, b in pairs]

    def evidence(c: Confirmation, rail: list[RailCheck]) -> Evidence:
        return Evidence(shown(c.suspect_pairs), shown(c.reference_pairs), rail)

    findings = LevelFindings(
        scores={n(node): v for node, v in first.scores.items()},
        bar=Cut.of(first.node_bar),
        suspects=[n(s) for s in first.nodes],
        confirmations={n(s): evidence(c, rails.get(s, [])) for s, c in nodes.items()},
        link_bar=Cut.of(first.link_bar) if first.link_bar else None,
        link_suspects=[Measured(n(a), n(b), first.ratios[(a, b)]) for a, b in first.links],
        link_confirmations={
            f"{n(a)}-{n(b)}": evidence(c, rail_checks(c, seen, t) if link_checks[(a, b)].slow else [])
            for (a, b), c in links.items()
        },
        pairs=[Measured(n(a), n(b), v) for (a, b), v in sorted(_slowest(bw).items())],
        flagged=[n(s) for s in flagged],
        flagged_links=[(n(a), n(b)) for a, b in flagged_links],
        flagged_rails=flagged_rails,
        flagged_ranks=flagged if level.kind == "local" else [],
    )
    return Judged(findings, _doubts(level, first.nodes, nodes, [_slowest(m) for m in seen], t), rounds)


def passes_for(tests: int, noise: float) -> int:
    """How many passes confirm `tests` suspects when a pass lets a healthy one through with
    probability `noise`: enough that tests x noise^passes < FALSE_ALARMS, CONFIRM_REPEATS to MAX_PASSES."""
    p = min(max(noise, PASS_NOISE_FLOOR), 0.5)
    wanted = math.ceil(math.log(FALSE_ALARMS / max(tests, 1)) / math.log(p))
    return min(MAX_PASSES, max(CONFIRM_REPEATS, wanted))


def _confirm(checks: list[_Check], measure: Measure, passes: int) -> tuple[list[dict[Pair, RailBw]], int]:
    """Every check's pairs, in rounds where no node is in two pairs, each suspect pair beside its
    reference; `passes` passes over the checks still slow. Each pass's measurements, and the rounds run."""
    seen: list[dict[Pair, RailBw]] = []
    rounds = 0
    for repeat in range(passes):
        pending = [c for c in checks if c.slow]
        if not pending:
            break
        # Every confirmation's first round first, then the second rounds: packed so, each suspect
        # pair runs beside its reference.
        wanted: list[Pair] = []
        for step in range(max(len(c.confirmation.rounds) for c in pending)):
            for c in pending:
                wanted += c.confirmation.rounds[step] if step < len(c.confirmation.rounds) else []
        measured: dict[Pair, RailBw] = {}
        for i, pairs in enumerate(pack(list(dict.fromkeys(wanted)))):
            measured.update(measure(pairs, f"confirmation {repeat + 1}.{i + 1}", True))
            rounds += 1
        seen.append(measured)
        slowest = [_slowest(m) for m in seen]
        for c in pending:
            c.slow = c.still_slow(slowest)
    return seen, rounds


def rail_checks(c: Confirmation, seen: Sequence[Mapping[Pair, RailBw]], threshold: float) -> list[RailCheck]:
    """Each rail of a suspect's pairs against the same rail of its references, as confirmed_node
    judges the pairs whole (none where the hosts have one rail, or the suspect no reference)."""
    best = _best(seen)
    if not c.suspect_pairs or not c.reference_pairs or len(best[c.suspect_pairs[0]]) < 2:
        return []
    checks = []
    for rail in range(len(best[c.suspect_pairs[0]])):
        on_rail = [{p: rails[rail] for p, rails in m.items()} for m in seen]
        shares = c.shares(on_rail)
        i = max(range(len(shares)), key=shares.__getitem__)
        reference = best[c.beside[i]][rail] if c.beside else min(best[p][rail] for p in c.reference_pairs)
        checks.append(RailCheck(rail, best[c.suspect_pairs[i]][rail], reference, shares[i] < 1 - threshold))
    return checks


def _best(seen: Sequence[Mapping[Pair, RailBw]]) -> dict[Pair, RailBw]:
    """Each pair's best over the passes, rail by rail."""
    best: dict[Pair, RailBw] = {}
    for measured in seen:
        for pair, rails in measured.items():
            best[pair] = tuple(map(max, rails, best[pair])) if pair in best else rails
    return best


def _some_rails(checks: list[RailCheck]) -> bool:
    """Some rails slow and some not: the rails are the culprits, not the host (slow on all of them)."""
    return any(r.slow for r in checks) and not all(r.slow for r in checks)


def _doubts(
    level: Level, slow: list[int], nodes: Mapping[int, Confirmation], passes: Passes, threshold: float
) -> list[str]:
    """What more pairs would settle: so many suspects that the bar is in doubt, a suspect with no
    healthy partner to confirm it against, or one whose re-measured pairs disagree."""
    n = level.name
    doubts = []
    if len(slow) > CROWDED * len(level.nodes):
        doubts.append(f"{len(slow)} suspects of {len(level.nodes)} {level.kind}s")
    for s, c in nodes.items():
        if not c.reference_pairs:
            doubts.append(f"{n(s)}: no healthy partner to confirm it against")
        elif mixed_node(c, passes, threshold):
            doubts.append(f"{n(s)}: its re-measured pairs disagree")
    return doubts


def _slowest(bw: Mapping[Pair, RailBw]) -> dict[Pair, float]:
    """A pair's bandwidth as a whole: its slowest rail's (every rail of a pair runs at once)."""
    return {p: min(rails) for p, rails in bw.items()}


# -- compute -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ComputeJudged:
    """The compute probe's bar and suspects, the reference they were re-timed beside, each
    re-timing's (suspect, reference) rates, and the ranks flagged."""

    bar: Bar
    suspects: list[int]
    reference: int
    beside: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    flagged: list[int] = field(default_factory=list)


def judge_compute(
    rates: Mapping[int, float], retime: Callable[[int, int], tuple[float, float]], threshold: float
) -> ComputeJudged:
    """Suspects: ranks whose matmul rate in the probe of every rank at once is below the median
    by more than the threshold. Unlike the exchanges, the noise bound is not applied here: where
    ranks share cores (several ranks per CPU host, or namespace hosts on one machine) the spread
    of the concurrent rates is contention, and it would hide the culprit. Each suspect is then
    re-timed beside the reference (retime(suspect, reference): both rates, the two alone and at
    the same moment, so whatever else the machine runs weighs on both), COMPUTE_REPEATS times,
    and flagged when it is below that reference by more than the threshold every time: a slow
    rank is slow every time."""
    bar, low = low_outliers(dict(rates), threshold, 0.0)
    reference = compute_reference(rates, low, bar.median)
    beside: dict[int, list[tuple[float, float]]] = {r: [] for r in low}
    for _ in range(COMPUTE_REPEATS if low else 0):
        for rank in low:
            beside[rank].append(retime(rank, reference))
    keep = 1 - threshold
    flagged = [r for r in low if all(s < keep * ref for s, ref in beside[r])]
    return ComputeJudged(bar, low, reference, beside, flagged)


def compute_reference(rates: Mapping[int, float], suspects: Sequence[int], median: float) -> int:
    """The rank a compute suspect is re-timed beside: never a suspect, and from the healthy half
    (at or above the median) where there is one, the one nearest the median: a rank a little
    slower than the bar would make every suspect look fine beside it."""
    healthy = [r for r in rates if r not in suspects]
    upper = [r for r in healthy if rates[r] >= median] or healthy
    return min(upper, key=lambda r: (abs(rates[r] - median), r))
