"""The verdict over a screen's pairs, on synthetic clusters: hosts, links and rails named exactly,
the rounds they take, the widening when the evidence is in doubt, and the compute stragglers."""

from __future__ import annotations

import pytest

from commbench.isolate.judge import Level, judge_compute, judge_level, screen_level
from commbench.isolate.screens import Adaptive, AllPairs
from tests.support.synthetic_cluster import SyntheticCluster, uniform_compute, uniform_noise


def _hosts(n: int) -> Level:
    return Level("host", list(range(n)), lambda h: f"h{h}")


def _screen(cluster: SyntheticCluster, screen=None, threshold: float = 0.2):
    screen = screen or Adaptive(cluster.hosts, seed=1)
    return screen_level(_hosts(cluster.hosts), screen, cluster.measure, threshold, 2.0)


def test_adaptive_names_a_slow_host_in_log2_n_rounds_and_four_of_confirmation():
    cluster = SyntheticCluster(64, noise=uniform_noise(0.05), seed=2)
    cluster.host_rate[17] = 0.5
    screened = _screen(cluster)
    assert screened.findings.flagged == ["h17"] and screened.findings.flagged_links == []
    # 6 rounds of new partners; the suspect beside a reference, two rounds a pass, two passes.
    assert (screened.screen_rounds, screened.confirmation_rounds) == (6, 4)
    assert [c for _, c, _ in cluster.rounds] == [False] * 6 + [True] * 4
    evidence = screened.findings.confirmations["h17"]
    assert [m.value < 0.6 for m in evidence.pairs] == [True, True] and all(m.value > 0.9 for m in evidence.references)


def test_a_healthy_cluster_takes_no_confirmation_round():
    cluster = SyntheticCluster(1024, noise=uniform_noise(0.05), seed=3)
    screened = _screen(cluster)
    assert screened.findings.flagged == [] and screened.findings.suspects == []
    assert (screened.screen_rounds, screened.confirmation_rounds) == (10, 0)


def test_three_slow_hosts_are_confirmed_in_the_same_rounds():
    cluster = SyntheticCluster(256, noise=uniform_noise(0.05), seed=4)
    for h in (3, 100, 200):
        cluster.host_rate[h] = 0.5
    screened = _screen(cluster)
    assert sorted(screened.findings.flagged) == ["h100", "h200", "h3"]
    assert (screened.screen_rounds, screened.confirmation_rounds) == (8, 4)


def test_a_slow_rail_is_named_as_the_rail_and_a_slow_host_as_the_host():
    cluster = SyntheticCluster(16, rails=2, noise=uniform_noise(0.03), seed=5)
    cluster.rail_rate[6, 1] = 0.4
    cluster.host_rate[9] = 0.4
    found = _screen(cluster).findings
    assert found.flagged == ["h9"] and [(r.host, r.rail) for r in found.flagged_rails] == [("h6", 1)]
    rails = found.confirmations["h6"].rails
    assert [r.slow for r in rails] == [False, True] and rails[1].best < 0.5 * rails[1].reference
    assert all(r.slow for r in found.confirmations["h9"].rails)


def test_a_slow_link_is_found_where_the_screen_met_its_pair():
    cluster = SyntheticCluster(16, noise=uniform_noise(0.03), seed=6)
    cluster.links[(2, 11)] = 0.3
    found = _screen(cluster, AllPairs(16)).findings
    assert found.flagged_links == [("h2", "h11")] and found.flagged == []
    link = found.link_confirmations["h2-h11"]
    assert link.pairs[0].value < 0.4 and min(m.value for m in link.references) > 0.9


def test_doubt_widens_the_screen_until_the_suspects_are_few_or_every_pair_is_met():
    """A third of 12 hosts slow: after 4 rounds the healthy hosts that met two or three of them score
    low too; the screen widens, and the verdict over more pairs names the slow ones alone."""
    cluster = SyntheticCluster(12, noise=uniform_noise(0.02), seed=7)
    for h in (1, 4, 7, 10):
        cluster.host_rate[h] = 0.4
    screened = _screen(cluster)
    assert sorted(screened.findings.flagged) == ["h1", "h10", "h4", "h7"]
    assert screened.findings.doubts and screened.screen_rounds > 4


def test_local_pairs_are_judged_as_ranks():
    level = Level("local", [0, 1, 2, 3], lambda r: f"h0:{r}")
    cluster = SyntheticCluster(4, seed=8)
    cluster.host_rate[2] = 0.3
    bw = cluster.measure([(0, 1), (2, 3)], "a", False) | cluster.measure([(0, 2), (1, 3)], "b", False)
    bw |= cluster.measure([(0, 3), (1, 2)], "c", False)
    judged = judge_level(level, bw, cluster.measure, 0.2, 2.0)
    assert judged.findings.flagged_ranks == [2] and judged.findings.flagged == ["h0:2"]


@pytest.mark.parametrize("seed", range(5))
def test_a_compute_straggler_is_flagged_and_a_burst_is_not(seed):
    cluster = SyntheticCluster(8, seed=seed, compute_noise=uniform_compute(0.05))
    cluster.compute[5] = 0.5
    judged = judge_compute(cluster.compute_rates(), cluster.retime, 0.2)
    assert judged.flagged == [5] and judged.reference != 5 and len(judged.beside[5]) == 3
    healthy = SyntheticCluster(8, seed=seed, compute_noise=uniform_compute(0.05))
    rates = healthy.compute_rates() | {3: 0.6}  # slow in the probe of every rank at once only
    assert judge_compute(rates, healthy.retime, 0.2).flagged == []
