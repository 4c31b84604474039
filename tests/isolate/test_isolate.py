"""`commbench isolate` without a cluster: the circle schedule, the robust rule on synthetic
clusters, the confirmations, the host checks, the verdict's text and chart, and the refusals."""

from __future__ import annotations

import json
import random
import statistics
from itertools import combinations

import pandas as pd
import pytest

from commbench.backends.job import Launch
from commbench.isolate.cluster import Cluster
from commbench.isolate.exchanges import PROBE_WINDOW_S, _window_sample
from commbench.isolate.judge import compute_reference
from commbench.isolate.node_sweep import under_torchrun
from commbench.isolate.schedule import byes, circle_rounds, pack
from commbench.isolate.verdict import (
    confirmed_link,
    confirmed_node,
    link_confirmation,
    low_outliers,
    mixed_node,
    node_confirmation,
    ranked_healthy,
    robust_bar,
    suspects,
)
from commbench.results.ownership import written_by_commbench
from tests.support.distributed import commbench, run_ranks
from tests.support.errors import assert_one_line_error
from tests.support.fake_hosts import ranks_on_fake_hosts, run_on_fake_hosts


@pytest.mark.parametrize("n", range(2, 66))
def test_circle_schedule_meets_every_pair_once_in_n_minus_1_rounds(n):
    rounds = circle_rounds(n)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    met = [pair for r in rounds for pair in r]
    assert sorted(met) == list(combinations(range(n), 2))  # every pair exactly once
    for r in rounds:
        hosts = [h for pair in r for h in pair]
        assert len(hosts) == len(set(hosts))  # no host in two pairs of a round
        assert len(r) == n // 2
        assert len(byes(n, r)) == n % 2  # odd n: exactly one host sits each round out
    if n % 2:
        assert sorted(h for r in rounds for h in byes(n, r)) == list(range(n))  # each host sits out once


def test_pack_puts_no_host_twice_in_a_round():
    pairs = [(0, 1), (0, 2), (1, 2), (3, 4), (0, 3)]
    rounds = pack(pairs)
    assert sorted(p for r in rounds for p in r) == sorted(pairs)
    for r in rounds:
        hosts = [h for p in r for h in p]
        assert len(hosts) == len(set(hosts))


def _pairs(speeds: list[float], noise: float = 0.0, seed: int = 0) -> dict[tuple[int, int], float]:
    """A cluster whose pair bandwidth is the slower host's speed, times noise."""
    rng = random.Random(seed)
    return {
        (a, b): min(speeds[a], speeds[b]) * (1 + rng.uniform(-noise, noise))
        for a, b in combinations(range(len(speeds)), 2)
    }


@pytest.mark.parametrize(("n", "slow"), [(8, 1), (8, 2), (8, 3), (16, 7), (64, 31), (5, 1)])
def test_the_robust_rule_names_the_slow_hosts_and_only_them(n, slow):
    """One, two and N/2-1 slow hosts (a quarter of the speed), with 5% noise on every pair."""
    speeds = [1.0] * (n - slow) + [0.25] * slow
    found = suspects(range(n), _pairs(speeds, noise=0.05), 0.2)
    assert sorted(found.nodes) == list(range(n - slow, n))
    assert found.links == []


def test_a_slow_host_does_not_drag_the_bar_toward_itself():
    scores = {h: 1.0 for h in range(7)} | {7: 0.1}
    bar, low = low_outliers(scores)
    assert bar.median == 1.0 and bar.mad == 0.0 and low == [7]
    # A mean and standard deviation bar, which the slow host itself widens, would not catch it.
    assert statistics.fmean(scores.values()) - 3 * statistics.stdev(scores.values()) < scores[7]


@pytest.mark.parametrize("seed", range(20))
def test_a_healthy_cluster_with_noise_names_nothing(seed):
    found = suspects(range(16), _pairs([1.0] * 16, noise=0.15, seed=seed), 0.2)
    assert found.nodes == [] and found.links == []


def test_the_noise_bound_widens_the_bar_in_a_noisy_cluster():
    """Hosts that scatter by +-30% around the median: a host 25% below it is within their noise,
    though beyond the threshold alone."""
    scattered = [0.7, 0.8, 0.9, 1.0, 1.0, 1.0, 1.0, 1.1, 1.2, 1.3]
    bar = robust_bar([*scattered, 0.75], threshold=0.2)
    assert bar.median == 1.0 and bar.k * 1.4826 * bar.mad > 0.2 * bar.median  # the noise sets the margin
    assert not bar.low(0.75) and bar.median - 0.75 > 0.2 * bar.median
    assert bar.low(0.5)


def test_a_slow_link_between_healthy_hosts_is_a_link_not_a_host():
    bw = _pairs([1.0] * 6, noise=0.03)
    bw[(1, 4)] = 0.3
    found = suspects(range(6), bw, 0.2)
    assert found.nodes == [] and found.links == [(1, 4)]


def test_confirmation_clears_a_burst_and_keeps_a_real_fault():
    scores = {0: 1.0, 1: 1.0, 2: 1.0, 3: 0.3}
    bar, _ = low_outliers(scores)
    confirmation = node_confirmation(3, ranked_healthy(scores, {3}))
    # Each suspect pair runs beside a reference pair of healthy nodes in the same round.
    assert confirmation.rounds == [[(0, 3), (1, 2)], [(1, 3), (0, 2)]]
    assert confirmation.suspect_pairs == [(0, 3), (1, 3)] and confirmation.reference_pairs == [(1, 2), (0, 2)]
    slow_again = {(0, 3): 0.3, (1, 3): 0.31, (1, 2): 1.0, (0, 2): 0.98}
    fine_now = {(0, 3): 0.3, (1, 3): 0.97, (1, 2): 1.0, (0, 2): 0.98}  # one partner says it is fine: a burst
    assert confirmed_node(confirmation, [slow_again], 0.2, bar) and not mixed_node(confirmation, [slow_again], 0.2)
    assert not confirmed_node(confirmation, [fine_now], 0.2, bar) and mixed_node(confirmation, [fine_now], 0.2)
    # Shares are taken within a pass: a second pass whose rounds both ran slow (a burst on the
    # machine, the references as slow as the suspect's pairs) does not lift the suspect's best.
    burst = {pair: bw * 0.5 for pair, bw in slow_again.items()}
    assert confirmed_node(confirmation, [slow_again, burst], 0.2, bar)
    # A pass in which the suspect's pair ran fast beside its reference clears it.
    assert not confirmed_node(confirmation, [slow_again, fine_now], 0.2, bar)
    # With two healthy partners only, the reference is the pair of them, in a round of its own.
    assert node_confirmation(2, [0, 1]).rounds == [[(0, 2)], [(1, 2)], [(0, 1)]]
    link = link_confirmation(0, 1, [0, 1, 2, 3])
    assert link.rounds == [[(0, 1), (2, 3)], [(0, 2), (1, 3)]] and link.suspect_pairs == [(0, 1)]
    assert confirmed_link(link, [{(0, 1): 0.25, (2, 3): 0.97, (0, 2): 1.0, (1, 3): 0.98}], 0.2)
    assert not confirmed_link(link, [{(0, 1): 0.9, (2, 3): 0.97, (0, 2): 1.0, (1, 3): 0.98}], 0.2)
    # A burst that slows the link's whole round slows the healthy pair beside it too: not a link.
    assert not confirmed_link(link, [{(0, 1): 0.5, (2, 3): 0.55, (0, 2): 1.0, (1, 3): 0.98}], 0.2)
    # ... nor does it when only the best of several passes, each with its own burst, is compared.
    passes = [
        {(0, 1): 0.5, (2, 3): 0.55, (0, 2): 1.0, (1, 3): 0.98},
        {(0, 1): 0.6, (2, 3): 1.2, (0, 2): 0.6, (1, 3): 0.6},
    ]
    assert confirmed_link(link, passes[1:], 0.2) is False and confirmed_link(link, passes, 0.2) is False


def test_hosts_that_cannot_be_paired_are_refused_in_one_line():
    assert "2 or more hosts" in Cluster.of(["a", "a"]).refusal()
    uneven = Cluster.of(["a", "a", "b"]).refusal()
    assert "a: 2, b: 1" in uneven and "\n" not in uneven
    cluster = Cluster.of(["a", "b", "a", "b"])
    assert cluster.refusal() is None and cluster.pair_ranks(0, 1) == [0, 1, 2, 3]
    assert cluster.ranks == ((0, 2), (1, 3)) and cluster.rank_name(3) == "b:1"


@pytest.mark.slow  # starts processes, or runs whole fake sweeps: outside the quick loop
def test_isolate_on_one_host_exits_2_with_one_line(tmp_path):
    result = commbench("isolate", "--nproc", "2", "-o", str(tmp_path / "one.csv"), "--size", "64K", timeout=120)
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("commbench: error:")]
    assert len(errors) == 1 and "2 or more hosts" in errors[0]
    assert "Traceback" not in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--threshold", "120%"], "--threshold"),
        (["--size", "4"], "--size"),
        (["--json", "/nonexistent/x.json"], "/nonexistent"),
    ],
)
def test_bad_isolate_options_are_one_line_errors(args, message, tmp_path):
    result = commbench("isolate", *args, timeout=60, cwd=tmp_path)  # a refused run may leave results/ there
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and message in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--screen", "fastest"], "Invalid value for '--screen': 'fastest' is not one of 'adaptive', 'all-pairs'"),
        (["--rails", "eth0 eth1"], "--rails takes auto or the interfaces of local ranks 0, 1, ... such as eth0,eth1"),
        (["--rails", ""], "--rails takes auto"),
    ],
)
def test_a_screen_or_rails_that_cannot_be_are_one_line_errors(args, message):
    from click.testing import CliRunner

    from commbench.cli import main

    assert_one_line_error(CliRunner().invoke(main, ["isolate", *args]), message, exit_code=2)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("hosts", "args", "message"),
    [
        (["a", "b", "c"], ["--bisect"], "--bisect needs 4 or more hosts to halve (got 3); leave it out"),
        (["a", "b"], ["--rails", "auto"], "--rails judges each local rank's NIC"),
        (["a", "a", "b", "b"], ["--rails", "eth0,eth1,eth2"], "names 3 interface(s), but each host runs 2 ranks"),
    ],
)
def test_hosts_the_options_cannot_sweep_are_refused_in_one_line_on_every_rank(tmp_path, hosts, args, message):
    results = run_on_fake_hosts(hosts, "isolate", "-o", str(tmp_path / "r.csv"), "--size", "64K", *args, timeout=120)
    assert [r.returncode for r in results] == [2] * len(hosts), results[0].stderr
    lines = [line for line in results[0].stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in results[0].stderr
    assert not (tmp_path / "r.csv").exists()


@pytest.mark.slow
def test_a_host_that_dies_mid_screen_is_named_by_every_survivor(tmp_path):
    """4 hosts over loopback; the third is killed once the screen's first round has run: each
    survivor ends with one line (exit 3) that names the step it was in and the host that is gone."""
    args = ("isolate", "-o", str(tmp_path / "d.csv"), "--size", "64K", "--iters", "100", "--timeout", "30")
    with ranks_on_fake_hosts(["h0", "h1", "h2", "h3"], *args, "--no-plot") as procs:
        for line in procs[0].stdout:
            if line.startswith("# adaptive round 1:"):
                break
        procs[2].kill()
        ends = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    for rank in (0, 1, 3):
        code, err = ends[rank]
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 3 and len(lines) == 1 and "Traceback" not in err, err
        assert lines[0].startswith(f"commbench: rank {rank}: ") and "rank 2 (on h2) is gone" in lines[0], err


def test_the_compute_reference_is_never_a_suspect_and_comes_from_the_healthy_half():
    rates = {0: 100.0, 1: 96.0, 2: 12.0, 3: 104.0, 4: 99.0}
    # Median 99: rank 4 sits on it; a suspect is never chosen, even one at the median.
    assert compute_reference(rates, [2], 99.0) == 4
    assert compute_reference(rates, [2, 4], 99.0) == 0  # 0 (100) over 1 (96): at or above the median first
    assert compute_reference({0: 50.0, 1: 10.0}, [1], 50.0) == 0


def test_only_ranks_torchrun_started_turn_a_finding_into_exit_0():
    elastic = {"TORCHELASTIC_RUN_ID": "none"}
    assert under_torchrun(Launch("torchrun", 0, 2), elastic)
    assert not under_torchrun(Launch("torchrun", 0, 2), {})  # RANK and WORLD_SIZE set by hand
    assert not under_torchrun(Launch("torchrun", 0, 2, spawned=True), elastic)  # commbench's own ranks
    assert not under_torchrun(Launch("slurm", 0, 2), elastic)


class QuotaKernel:
    """A matmul of 1 ms under a CPU quota of 10 ms per 100 ms period: it runs at full speed until
    the period's share is spent, then waits for the next period (as CFS throttling does)."""

    def __init__(self, period_s: float = 0.1, share_s: float = 0.01, run_s: float = 0.001) -> None:
        import time

        self.time, self.period, self.share, self.run_s = time, period_s, share_s, run_s
        self.period_start, self.used = time.perf_counter(), 0.0

    def run(self) -> None:
        now = self.time.perf_counter()
        if now - self.period_start >= self.period:  # a new period: a new share
            self.period_start, self.used = now, 0.0
        if self.used + self.run_s > self.share:  # throttled until the period ends
            self.time.sleep(max(0.0, self.period_start + self.period - now))
            self.period_start, self.used = self.time.perf_counter(), 0.0
        self.time.sleep(self.run_s)
        self.used += self.run_s


def test_a_probe_sample_spans_quota_periods_so_a_throttled_rank_reads_slow():
    """The fastest short sample of a throttled rank runs inside its share and looks healthy; a
    sample of PROBE_WINDOW_S (two periods) includes the waits: its time per matmul is several
    times the kernel's own (10x at this quota; sleeps only ever run long, so at least that)."""
    assert PROBE_WINDOW_S >= 0.2
    kernel = QuotaKernel()
    per_matmul_us = _window_sample(kernel, lambda: None)
    assert per_matmul_us > 4 * kernel.run_s * 1e6


@pytest.mark.slow
def test_isolate_end_to_end_on_hosts_named_by_commbench_host(tmp_path):
    """Two hosts of two ranks each over loopback, named through COMMBENCH_HOST (no root needed):
    host pairs exchange local rank i with local rank i, local pairs are measured, every output is written."""
    out = tmp_path / "iso.csv"
    results = run_on_fake_hosts(
        ["h0", "h0", "h1", "h1"],
        *("isolate", "-o", str(out), "--json", str(tmp_path / "v.json"), "--size", "64K", "--iters", "5", "-w", "1"),
        timeout=240,
    )
    codes = [r.returncode for r in results]
    verdict = json.loads((tmp_path / "v.json").read_text())
    flagged = verdict["flagged_hosts"] or verdict["flagged_links"] or verdict["flagged_ranks"]
    assert codes == [1 if flagged else 0] * 4, results[0].stderr[-2000:]
    assert verdict["hosts"] == ["h0", "h1"] and set(verdict) >= {"flagged_hosts", "flagged_links", "flagged_ranks"}
    rows = pd.read_csv(out)
    host = rows[rows.kind == "host_pair"]
    assert list(host.size_bytes) == [65536, 8] and set(host.ranks_a) == {"0;1"} and set(host.ranks_b) == {"2;3"}
    local = rows[rows.kind == "local_pair"]
    assert sorted(zip(local.host_a, local.host_b)) == [("h0:0", "h0:1")] * 2 + [("h1:0", "h1:1")] * 2
    assert (rows.wrong == 0).all() and (rows.time_us_p50_lo <= rows.time_us_p50).all()
    assert (tmp_path / "iso-isolate.png").exists() and (tmp_path / "iso.verdict.json").exists()
    # Rank 0 leaves the verdict beside the CSV; the command (rank 0's process, under a launcher)
    # writes --json, claimed when planned, and the chart from it: commbench's own files, both.
    tail = results[0].stdout.splitlines()[-3:]
    assert tail[0].startswith("# done: results in") and tail[1:] == [
        f"# json: {tmp_path / 'v.json'}",
        f"# chart: {tmp_path / 'iso-isolate.png'}",
    ]
    assert (tmp_path / "v.json").read_bytes() == (tmp_path / "iso.verdict.json").read_bytes()
    assert written_by_commbench(tmp_path / "v.json") and written_by_commbench(tmp_path / "iso-isolate.png")


def _rounds_in_turn(backend, partitions):
    """Rounds.run over partitions in turn: (groups created, every exchange's wrong count and ranks)."""
    from commbench.isolate.exchanges import Rounds
    from commbench.run.config import SweepConfig
    from commbench.run.watchdog import Watchdog

    rounds = Rounds(backend, SweepConfig("gloo", ("sendrecv",), (64,), iters=2, warmup=1), Watchdog(60, backend.rank))
    seen = []
    for groups in partitions:
        found = rounds.run(groups, [64], "isolate test", iters=2, groups=groups)
        seen.append([(ex.ranks, ex.wrong) for unit in found for ex in unit])
    return rounds.created, seen


@pytest.mark.slow
def test_a_round_that_forms_the_last_rounds_groups_keeps_them():
    """The size probe's repeats and the first round pair the same ranks: their groups are created once."""
    same, other = [[0, 1], [2, 3]], [[0, 2], [1, 3]]
    results = run_ranks(_rounds_in_turn, 4, [same, same, same, other, same])
    for created, seen in results:
        assert created == 3  # same (kept twice), other, same again
        assert seen == [[((0, 1), 0), ((2, 3), 0)]] * 3 + [[((0, 2), 0), ((1, 3), 0)], [((0, 1), 0), ((2, 3), 0)]]
