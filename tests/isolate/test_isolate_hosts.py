"""`commbench isolate` on a real multi-host cluster: hosts in network namespaces on a bridge
(scripts/hosts.sh), one of them degraded (its rate, one link, one rail, or its CPU).

Every host is shaped with tbf, the healthy ones to HEALTHY and a slow one to a quarter of that,
so "a quarter of the others' rate" holds by construction, and the pair bandwidths are set by the
shaper rather than by this machine's shared cores (which unshaped veths would measure). The rails
cluster gives each host two interfaces on two bridges (one per rail), each local rank's exchanges
bound to its rail's interface.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from commbench.isolate.findings import Verdict
from tests.support.distributed import REPO
from tests.test_two_hosts import netns_unavailable

SCRIPT = REPO / "scripts" / "hosts.sh"
HEALTHY, SLOW = "200mbit", "50mbit"  # the slow host at a quarter of the others' rate
# Small and short, yet large enough for the shaper (not this machine's busy cores) to set a pair's
# time: 512 KiB each way takes ~25 ms at HEALTHY, ~90 ms at SLOW.
FAST = ["--size", "512K", "--iters", "6", "--warmup", "1", "--rounds", "2", "--timeout", "60", "--no-plot"]
RUNS = 5
# A tenth of one core: well below what a rank gets here even with every other rank and job on
# the machine's cores competing, so the throttled rank is the slowest by far.
CPU_QUOTA = "10%"

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Fabric:
    """A cluster scripts/hosts.sh makes: its hosts' prefix (beside a developer's cbh-* and the
    two-hosts test's cbt1/cbt2), its /24 and its rails (interfaces per host, one bridge each)."""

    prefix: str
    net: str
    size: int
    rails: int = 1

    @property
    def hosts(self) -> list[str]:
        return [f"{self.prefix}{i}" for i in range(1, self.size + 1)]

    @property
    def env(self) -> dict[str, str]:
        return {"HOSTS_PREFIX": self.prefix, "HOSTS_NET": self.net, "HOSTS_RAILS": str(self.rails)}

    def sh(self, *args: str, check: bool = True) -> str:
        result = subprocess.run(
            ["bash", str(SCRIPT), *args], capture_output=True, text=True, env={**os.environ, **self.env}, timeout=120
        )
        assert result.returncode == 0 or not check, result.stderr
        return result.stderr

    def up(self) -> None:
        # What a run killed before its teardown left behind (namespaces, links, cgroups) would stop `up`.
        self.sh("down", check=False)
        self.sh("up", str(self.size))

    def down(self) -> None:
        self.sh("down", check=False)
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert self.prefix not in left, "hosts.sh down left a namespace behind"

    def shape(self, hosts: list[str], slow: str | None = None, rail: int | None = None) -> None:
        """Every host at HEALTHY both ways on every rail, `slow` at SLOW (on `rail` alone if given); no CPU limit."""
        for host in hosts:
            self.sh("slow", host, HEALTHY)
            self.sh("cpu", host, "off")
        if slow is not None:
            self.sh("slow", slow, SLOW, *([] if rail is None else [str(rail)]))

    def sent_bytes(self, host: str, rail: int) -> int:
        """Bytes the host has sent on its interface of that rail."""
        text = subprocess.run(
            ["ip", "-n", host, "-s", "-j", "link", "show", f"eth{rail}"], capture_output=True, text=True, check=True
        ).stdout
        return int(json.loads(text)[0]["stats64"]["tx"]["bytes"])

    def isolate(
        self,
        hosts: list[str],
        out: Path,
        *args: str,
        per_host: int = 1,
        torchrun: bool = False,
        one_thread: bool = True,
    ) -> tuple[int, Verdict, str]:
        """`commbench isolate` with `per_host` ranks on each host, rank 0 on the first; (exit code,
        verdict, rank 0's output). Ranks get a launcher's variables (as srun or mpirun would set them),
        or are started by one torchrun node per host. one_thread False leaves OMP_NUM_THREADS unset, as
        docs/isolate.md launches it (torchrun sets it to 1 only with more than one rank per node)."""
        world = len(hosts) * per_host
        common = ["-o", str(out), "--overwrite", "--json", str(out.with_suffix(".json")), *FAST, *args]
        env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
        env |= {"GLOO_SOCKET_IFNAME": "eth0", **self.env} | ({"OMP_NUM_THREADS": "1"} if one_thread else {})
        master = {"MASTER_ADDR": f"{self.net}.1", "MASTER_PORT": "29517"}
        procs = []
        for node, host in enumerate(hosts):
            if torchrun:
                command = [
                    *f"{sys.executable} -m torch.distributed.run --nnodes {len(hosts)} --nproc-per-node {per_host}".split(),
                    *f"--node-rank {node} --master-addr {self.net}.1 --master-port 29517 --rdzv-backend static".split(),
                    "-m",
                    "commbench",
                    "isolate",
                    *common,
                ]
                procs.append(_on(host, command, env))
                continue
            for local in range(per_host):
                rank = node * per_host + local
                rank_env = {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local)}
                rank_env |= {"LOCAL_WORLD_SIZE": str(per_host), "GROUP_RANK": str(node), **master}
                procs.append(_on(host, [sys.executable, "-m", "commbench", "isolate", *common], {**env, **rank_env}))
        try:
            outputs = [p.communicate(timeout=240) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        codes = [p.returncode for p in procs]
        text = outputs[0][0] + outputs[0][1]
        tails = "\n".join(
            f"--- process {i}: exit {c}\n{(o + e)[-1500:]}" for i, (c, (o, e)) in enumerate(zip(codes, outputs))
        )
        assert all(c == codes[0] for c in codes) and codes[0] in (0, 1), f"{codes}\n{tails}"
        # A run that reached its verdict prints no traceback on any node (torchrun's ChildFailedError included).
        texts = [without_exit_barrier_race(out + err) for out, err in outputs]
        assert not any("Traceback" in t for t in texts), next(t for t in texts if "Traceback" in t)
        return codes[0], Verdict.from_json(json.loads(out.with_suffix(".json").read_text())), text


FABRIC = Fabric("cbi-", "198.19.7", 8)
RAILED = Fabric("cbr-", "198.19.9", 4, rails=2)  # rail 1 on 198.19.10


def _cluster(fabric: Fabric):
    if (reason := netns_unavailable()) is not None:
        pytest.skip(reason)
    try:
        fabric.up()
        yield fabric
    finally:
        fabric.down()


@pytest.fixture(scope="module")
def cluster():
    yield from _cluster(FABRIC)


@pytest.fixture(scope="module")
def railed():
    yield from _cluster(RAILED)


def without_exit_barrier_race(text: str) -> str:
    """`text` less torchrun's "Error waiting on exit barrier" records. After every worker has exited 0,
    node 0's agent hosts the store and may leave torchrun's exit barrier before a peer agent's wait
    returns, and that peer logs a traceback (pytorch/pytorch#69520). It is torchrun's record, not
    commbench's: every line of it carries the same logger prefix (level, time, pid, file:line)."""
    ours = re.compile(r"^([EWI]\d{4} \S+ \d+ \S+:\d+\]) Error waiting on exit barrier", re.M)
    prefixes = tuple({m.group(1) for m in ours.finditer(text)})
    return "\n".join(line for line in text.splitlines() if not (prefixes and line.startswith(prefixes)))


def _on(host: str, command: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["bash", str(SCRIPT), "exec", host, *command],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def verdict_lines(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if line.startswith(("#", "  ")))


def test_isolate_names_the_slow_host_and_only_it_in_5_of_5_runs(cluster, tmp_path):
    hosts = cluster.hosts[:4]
    cluster.shape(hosts, slow=hosts[3])
    for run in range(RUNS):
        code, verdict, text = cluster.isolate(hosts, tmp_path / f"slow{run}.csv", "--screen", "all-pairs")
        print(f"--- run {run + 1}\n{verdict_lines(text)}")
        assert verdict.flagged_hosts == [hosts[3]], verdict_lines(text)
        assert verdict.flagged_links == [] and verdict.flagged_ranks == []
        assert code == 1
    rows = pd.read_csv(tmp_path / f"slow{RUNS - 1}.csv")  # the last run's, whose verdict is at hand
    pairs = rows[rows.kind == "host_pair"]
    # 4 hosts: 6 pairs in 3 rounds of 2, each at the bandwidth size and the latency size, with intervals.
    assert len(pairs) == 6 * 2 and sorted(pairs["round"].unique()) == [1, 2, 3]
    assert (pairs.time_us_p50_lo <= pairs.time_us_p50).all() and (pairs.time_us_p50 <= pairs.time_us_p50_hi).all()
    assert (pairs.wrong == 0).all()
    # The confirmation re-measured the culprit with two healthy partners, each beside a reference
    # pair of healthy hosts, in two rounds; a second pass, since it stayed slow (a link the noise
    # made a suspect may have been confirmed beside it).
    confirm = rows[rows.kind == "confirm_host"]
    evidence = verdict.host.confirmations[hosts[3]]
    measured = Counter(zip(confirm.host_a, confirm.host_b))
    assert len(evidence.pairs) == len(evidence.references) == 2 and all(m.b == hosts[3] for m in evidence.pairs)
    assert all(measured[(m.a, m.b)] == 2 for m in evidence.pairs + evidence.references), measured
    assert verdict.rounds.confirmation >= 4


def test_the_adaptive_screen_names_the_slow_host_of_8_in_3_rounds(cluster, tmp_path):
    hosts = cluster.hosts
    cluster.shape(hosts, slow=hosts[5])
    code, verdict, text = cluster.isolate(hosts, tmp_path / "adaptive.csv")
    print(verdict_lines(text))
    assert verdict.flagged_hosts == [hosts[5]] and verdict.flagged_links == [] and code == 1
    assert verdict.screen == "adaptive" and (verdict.rounds.screen, verdict.rounds.confirmation) == (3, 4)
    assert verdict.rounds_used == 7 and len(verdict.round_seconds) == 7
    rows = pd.read_csv(tmp_path / "adaptive.csv")
    pairs = rows[(rows.kind == "host_pair") & (rows.size_bytes > 8)]
    met = {tuple(sorted(p)) for p in zip(pairs.host_a, pairs.host_b)}
    # 3 rounds of 4 pairs, no pair twice, every host with 3 partners, the slow one among them.
    assert len(pairs) == 12 and len(met) == 12 and Counter(h for p in met for h in p) == {h: 3 for h in hosts}
    assert "screen adaptive: 3 round(s) of host pairs, 12 of 28 pairs met; 4 confirmation round(s)" in text


def test_isolate_names_nothing_on_equal_hosts_in_5_of_5_runs(cluster, tmp_path):
    hosts = cluster.hosts[:4]
    cluster.shape(hosts)
    alarms = 0
    for run in range(RUNS):
        code, verdict, text = cluster.isolate(hosts, tmp_path / f"healthy{run}.csv")
        print(f"--- run {run + 1}\n{verdict_lines(text)}")
        alarms += verdict.flagged
        assert code == (1 if verdict.flagged else 0)
    print(f"false alarms: {alarms} of {RUNS} healthy runs")
    assert alarms == 0


def test_isolate_measures_host_pairs_and_local_pairs_with_2_ranks_per_host(cluster, tmp_path):
    hosts = cluster.hosts[:4]
    cluster.shape(hosts, slow=hosts[1])
    code, verdict, text = cluster.isolate(
        hosts, tmp_path / "two.csv", "--screen", "all-pairs", per_host=2, torchrun=True
    )
    print(verdict_lines(text))
    rows = pd.read_csv(tmp_path / "two.csv")
    host_pairs = rows[(rows.kind == "host_pair") & (rows.size_bytes > 8)]
    assert len(host_pairs) == 6 and rows.rail.isna().all()  # without --rails, a row per pair of hosts
    # Local rank i of one host with local rank i of the other: ranks 2h and 2h+1 are on host h.
    for row in host_pairs.itertuples():
        a, b = hosts.index(row.host_a), hosts.index(row.host_b)
        assert row.ranks_a == f"{2 * a};{2 * a + 1}" and row.ranks_b == f"{2 * b};{2 * b + 1}"
    local = rows[(rows.kind == "local_pair") & (rows.size_bytes > 8)]
    assert sorted(local.host_a) == [f"{h}:0" for h in hosts] and sorted(local.host_b) == [f"{h}:1" for h in hosts]
    assert verdict.local is not None and len(verdict.compute.gflops) == 8
    # Under torchrun a finding exits 0 (torchrun reports any exit 1 as a crash) and says where it is.
    assert verdict.flagged_hosts == [hosts[1]] and code == 0
    assert "# isolate: exit code 0 under torchrun" in text


def test_isolate_on_an_odd_number_of_hosts(cluster, tmp_path):
    hosts = cluster.hosts[:5]
    cluster.shape(hosts, slow=hosts[2])
    code, verdict, text = cluster.isolate(hosts, tmp_path / "five.csv", "--screen", "all-pairs", "--bisect")
    print(verdict_lines(text))
    rows = pd.read_csv(tmp_path / "five.csv")
    pairs = rows[(rows.kind == "host_pair") & (rows.size_bytes > 8)]
    # 5 hosts: 10 pairs in 5 rounds of 2 (one host sits each round out), every pair once.
    assert len(pairs) == 10 and len({tuple(sorted(p)) for p in zip(pairs.host_a, pairs.host_b)}) == 10
    assert Counter(pairs["round"]) == {r: 2 for r in range(1, 6)}
    assert verdict.flagged_hosts == [hosts[2]] and code == 1
    # --bisect: all_reduce over hosts 1-2 and 3-4 at once; the half with the slow host is the slower.
    first = verdict.bisect[0]
    assert first.halves == [hosts[:2], hosts[2:4]] and first.result == "half 2 is slower"


def test_isolate_names_a_slow_link_between_two_healthy_hosts(cluster, tmp_path):
    hosts = cluster.hosts[:4]
    cluster.shape(hosts)
    cluster.sh("link", hosts[0], hosts[2], SLOW, HEALTHY)
    try:
        code, verdict, text = cluster.isolate(hosts, tmp_path / "link.csv", "--screen", "all-pairs")
    finally:
        cluster.shape(hosts)
    print(verdict_lines(text))
    assert verdict.flagged_links == [(hosts[0], hosts[2])], verdict_lines(text)
    assert verdict.flagged_hosts == [] and code == 1


def test_isolate_names_a_cpu_throttled_host_launched_as_the_docs_show(cluster, tmp_path):
    """docs/isolate.md's cluster: one torchrun node per host, OMP_NUM_THREADS unset (torch then runs
    one thread per core), one host under a CPU quota (cgroup cpu.max or v1's cfs quota). Its rank
    runs at full speed for 10 ms of every 100 ms, so only samples longer than a period catch it."""
    hosts = cluster.hosts[:4]
    cluster.shape(hosts)
    cluster.sh("cpu", hosts[2], CPU_QUOTA)
    try:
        code, verdict, text = cluster.isolate(hosts, tmp_path / "cpu.csv", torchrun=True, one_thread=False)
    finally:
        cluster.sh("cpu", hosts[2], "off")
    print(verdict_lines(text))
    compute = verdict.compute
    assert verdict.flagged_ranks == [2], verdict_lines(text)
    assert compute.flagged == [2] and compute.reference not in compute.suspects
    assert compute.gflops[f"{hosts[2]}:0"] == min(compute.gflops.values())
    assert verdict.flagged_links == [] and code == 0 and "# isolate: exit code 0 under torchrun" in text


RAIL_IFACES = ["--rails", "eth0,eth1"]


def test_a_slow_rail_is_named_as_the_rail_of_its_host(railed, tmp_path):
    """4 hosts of 2 ranks, local rank g bound to eth<g> on bridge br<g>; rail 1 of one host at a
    quarter of the rate: the verdict names that host's rail 1, not the host, in both screens."""
    hosts = railed.hosts
    railed.shape(hosts, slow=hosts[2], rail=1)
    before = [railed.sent_bytes(h, 1) for h in hosts]
    for screen in ("adaptive", "all-pairs"):
        out = tmp_path / f"rail-{screen}.csv"
        code, verdict, text = railed.isolate(hosts, out, "--screen", screen, *RAIL_IFACES, per_host=2)
        print(verdict_lines(text))
        assert [(r.host, r.rail) for r in verdict.flagged_rails] == [(hosts[2], 1)], verdict_lines(text)
        assert verdict.flagged_hosts == [] and verdict.flagged_links == [] and code == 1
        checks = verdict.host.confirmations[hosts[2]].rails
        assert [r.slow for r in checks] == [False, True]
        assert f"# isolate: 0 slow host(s); 0 slow link(s); 1 slow rail(s): {hosts[2]} rail 1" in text
    rows = pd.read_csv(tmp_path / "rail-adaptive.csv")
    pairs = rows[(rows.kind == "host_pair") & (rows.size_bytes > 8)]
    # A row per rail of each pair: local rank g of one host with local rank g of the other.
    assert sorted(pairs.rail.unique()) == [0, 1] and len(pairs) == 2 * 4
    assert all(int(a) % 2 == int(b) % 2 == rail for a, b, rail in zip(pairs.ranks_a, pairs.ranks_b, pairs.rail))
    # Rail 1's exchanges crossed eth1 (bound through GLOO_SOCKET_IFNAME): every host sent megabytes on it.
    sent = [railed.sent_bytes(h, 1) - b for h, b in zip(hosts, before)]
    assert min(sent) > 2**20, sent


def test_a_host_slow_on_every_rail_is_the_host(railed, tmp_path):
    hosts = railed.hosts
    railed.shape(hosts, slow=hosts[1])
    code, verdict, text = railed.isolate(hosts, tmp_path / "host.csv", *RAIL_IFACES, per_host=2)
    print(verdict_lines(text))
    assert verdict.flagged_hosts == [hosts[1]] and verdict.flagged_rails == [] and code == 1
    assert all(r.slow for r in verdict.host.confirmations[hosts[1]].rails)
