"""The screens: which pairs they propose, how they widen, where they end; the bisection's steps."""

from __future__ import annotations

import math
from itertools import combinations

import pytest

from commbench.isolate.schedule import circle_count, circle_rounds
from commbench.isolate.screens import SCREENS, Adaptive, AllPairs, Bisect, Seen


def _run(screen, hosts: int, widen: int = 0) -> Seen:
    """Every round the screen proposes, widened `widen` times, each pair measured at 1.0."""
    seen = Seen(hosts)
    for _ in range(widen + 1):
        while (pairs := screen.next_round(seen)) is not None:
            seen.add(pairs, {p: (1.0,) for p in pairs})
        seen.widened += 1
    return seen


@pytest.mark.parametrize("n", [2, 3, 4, 7, 8, 33, 64])
def test_all_pairs_is_the_circle_schedule(n):
    seen = _run(AllPairs(n), n)
    assert seen.rounds == circle_rounds(n) and len(seen.rounds) == circle_count(n)
    assert sorted(seen.results) == list(combinations(range(n), 2))


@pytest.mark.parametrize("n", [4, 5, 8, 9, 64, 100, 1024])
def test_adaptive_meets_new_partners_in_log2_n_rounds(n):
    seen = _run(Adaptive(n, seed=7), n)
    wanted = min(max(2, math.ceil(math.log2(n))), circle_count(n))
    assert len(seen.rounds) == wanted
    met = [p for r in seen.rounds for p in r]
    assert len(met) == len(set(met))  # no pair twice
    for r in seen.rounds:
        hosts = [h for p in r for h in p]
        assert len(hosts) == len(set(hosts)) and len(r) == n // 2  # a perfect matching (one bye for odd n)
    partners = {h: {b if a == h else a for a, b in met if h in (a, b)} for h in range(n)}
    assert min(len(p) for p in partners.values()) >= wanted - (n % 2)


def test_adaptive_widens_by_as_many_rounds_up_to_all_pairs():
    screen = Adaptive(16, seed=1)
    assert [len(_run(screen, 16, w).rounds) for w in range(5)] == [4, 8, 12, 15, 15]
    every = _run(screen, 16, 4)
    assert sorted(p for r in every.rounds for p in r) == list(combinations(range(16), 2))


def test_the_seed_shuffles_the_pairs_and_every_rank_proposes_the_same():
    assert _run(Adaptive(64, seed=3), 64).rounds == _run(Adaptive(64, seed=3), 64).rounds
    assert _run(Adaptive(64, seed=3), 64).rounds != _run(Adaptive(64, seed=4), 64).rounds


def test_the_pair_screens_are_named_and_the_default_comes_first():
    assert list(SCREENS) == ["adaptive", "all-pairs"]
    assert all(screen.refusal(2) is None for screen in SCREENS.values())


def test_bisect_goes_into_the_slower_half_until_the_halves_are_even():
    slow, screen = 5, Bisect(8, threshold=0.2)
    seen = Seen(8)
    while (halves := screen.next_round(seen)) is not None:
        seen.add(halves, {half: (300.0 if slow in half else 100.0,) for half in halves})
    steps = screen.steps(seen)
    assert [s[0] for s in steps] == [[(0, 1, 2, 3), (4, 5, 6, 7)], [(4, 5), (6, 7)]]
    assert [s[2] for s in steps] == ["half 2 is slower", "half 1 is slower"]
    even = Seen(8)
    even.add(screen.next_round(even), {(0, 1, 2, 3): (100.0,), (4, 5, 6, 7): (105.0,)})
    assert screen.next_round(even) is None and screen.steps(even)[0][2] == "even: the halves are as fast"
    assert "4 or more hosts" in Bisect.refusal(3) and Bisect.refusal(4) is None
