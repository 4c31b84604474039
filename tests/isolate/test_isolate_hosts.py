"""`commbench isolate` on a real multi-host cluster: hosts in network namespaces on a bridge
(scripts/hosts.sh), one of them degraded (its rate, one link, or its CPU).

Every host is shaped with tbf, the healthy ones to HEALTHY and a slow one to a quarter of that,
so "a quarter of the others' rate" holds by construction, and the pair bandwidths are set by the
shaper rather than by this machine's shared cores (which unshaped veths would measure).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from tests.support.distributed import REPO
from tests.test_two_hosts import netns_unavailable

SCRIPT = REPO / "scripts" / "hosts.sh"
PREFIX = "cbi-"  # its own hosts, beside a developer's cbh-* and the two-hosts test's cbt1/cbt2
NET = "198.19.7"
HOSTS = [f"{PREFIX}{i}" for i in range(1, 6)]
HEALTHY, SLOW = "200mbit", "50mbit"  # the slow host at a quarter of the others' rate
# Small and short, yet large enough for the shaper (not this machine's busy cores) to set a pair's
# time: 512 KiB each way takes ~25 ms at HEALTHY, ~90 ms at SLOW.
FAST = ["--size", "512K", "--iters", "6", "--warmup", "1", "--rounds", "2", "--timeout", "60", "--no-plot"]
RUNS = 5
# A tenth of one core: well below what a rank gets here even with every other rank and job on
# the machine's cores competing, so the throttled rank is the slowest by far.
CPU_QUOTA = "10%"

pytestmark = pytest.mark.slow


def hosts_sh(*args: str) -> str:
    result = subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "HOSTS_PREFIX": PREFIX, "HOSTS_NET": NET},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stderr


@pytest.fixture(scope="module")
def cluster():
    if (reason := netns_unavailable()) is not None:
        pytest.skip(reason)
    # What a run killed before its teardown left behind (namespaces, links, cgroups) would stop `up`.
    subprocess.run(
        ["bash", str(SCRIPT), "down"], env={**os.environ, "HOSTS_PREFIX": PREFIX}, capture_output=True, timeout=120
    )
    try:
        hosts_sh("up", str(len(HOSTS)))
        yield HOSTS
    finally:
        subprocess.run(
            ["bash", str(SCRIPT), "down"], env={**os.environ, "HOSTS_PREFIX": PREFIX}, capture_output=True, timeout=120
        )
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert PREFIX not in left, "hosts.sh down left a namespace behind"


def shape(hosts: list[str], slow: str | None = None) -> None:
    """Every host at HEALTHY both ways, `slow` at SLOW; no CPU limit."""
    for host in hosts:
        hosts_sh("slow", host, SLOW if host == slow else HEALTHY)
        hosts_sh("cpu", host, "off")


def isolate(
    hosts: list[str], out: Path, *args: str, per_host: int = 1, torchrun: bool = False, one_thread: bool = True
) -> tuple[int, dict, str]:
    """`commbench isolate` with `per_host` ranks on each host, rank 0 on the first; (exit code,
    verdict, rank 0's output). Ranks get a launcher's variables (as srun or mpirun would set them),
    or are started by one torchrun node per host. one_thread False leaves OMP_NUM_THREADS unset, as
    docs/isolate.md launches it (torchrun sets it to 1 only with more than one rank per node)."""
    world = len(hosts) * per_host
    common = ["-o", str(out), "--overwrite", "--json", str(out.with_suffix(".json")), *FAST, *args]
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env |= {"GLOO_SOCKET_IFNAME": "eth0", "HOSTS_PREFIX": PREFIX} | ({"OMP_NUM_THREADS": "1"} if one_thread else {})
    master = {"MASTER_ADDR": f"{NET}.1", "MASTER_PORT": "29517"}
    procs = []
    for node, host in enumerate(hosts):
        if torchrun:
            command = [
                *f"{sys.executable} -m torch.distributed.run --nnodes {len(hosts)} --nproc-per-node {per_host}".split(),
                *f"--node-rank {node} --master-addr {NET}.1 --master-port 29517 --rdzv-backend static".split(),
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
    return codes[0], json.loads(out.with_suffix(".json").read_text()), text


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
    hosts = cluster[:4]
    shape(hosts, slow=hosts[3])
    for run in range(RUNS):
        code, verdict, text = isolate(hosts, tmp_path / f"slow{run}.csv")
        print(f"--- run {run + 1}\n{verdict_lines(text)}")
        assert verdict["flagged_hosts"] == [hosts[3]], verdict_lines(text)
        assert verdict["flagged_links"] == [] and verdict["flagged_ranks"] == []
        assert code == 1
    print(json.dumps({k: verdict[k] for k in ("hosts", "flagged_hosts", "flagged_links", "flagged_ranks")}))
    rows = pd.read_csv(tmp_path / "slow0.csv")
    pairs = rows[rows.kind == "host_pair"]
    # 4 hosts: 6 pairs in 3 rounds of 2, each at the bandwidth size and the latency size, with intervals.
    assert len(pairs) == 6 * 2 and sorted(pairs["round"].unique()) == [1, 2, 3]
    assert (pairs.time_us_p50_lo <= pairs.time_us_p50).all() and (pairs.time_us_p50 <= pairs.time_us_p50_hi).all()
    assert (pairs.wrong == 0).all()
    # The confirmation re-measured the culprit against two healthy partners, and those two against each other.
    confirm = rows[rows.kind == "confirm_host"]
    assert (confirm.host_b == hosts[3]).sum() == 2 * 2 and len(confirm) == 3 * 2


def test_isolate_names_nothing_on_equal_hosts_in_5_of_5_runs(cluster, tmp_path):
    hosts = cluster[:4]
    shape(hosts)
    alarms = 0
    for run in range(RUNS):
        code, verdict, text = isolate(hosts, tmp_path / f"healthy{run}.csv")
        print(f"--- run {run + 1}\n{verdict_lines(text)}")
        flagged = verdict["flagged_hosts"] + verdict["flagged_links"] + verdict["flagged_ranks"]
        alarms += bool(flagged)
        assert code == (1 if flagged else 0)
    print(f"false alarms: {alarms} of {RUNS} healthy runs")
    assert alarms == 0


def test_isolate_measures_host_pairs_and_local_pairs_with_2_ranks_per_host(cluster, tmp_path):
    hosts = cluster[:4]
    shape(hosts, slow=hosts[1])
    code, verdict, text = isolate(hosts, tmp_path / "two.csv", per_host=2, torchrun=True)
    print(verdict_lines(text))
    rows = pd.read_csv(tmp_path / "two.csv")
    host_pairs = rows[(rows.kind == "host_pair") & (rows.size_bytes > 8)]
    assert len(host_pairs) == 6
    # Local rank i of one host with local rank i of the other: ranks 2h and 2h+1 are on host h.
    for row in host_pairs.itertuples():
        a, b = hosts.index(row.host_a), hosts.index(row.host_b)
        assert row.ranks_a == f"{2 * a};{2 * a + 1}" and row.ranks_b == f"{2 * b};{2 * b + 1}"
    local = rows[(rows.kind == "local_pair") & (rows.size_bytes > 8)]
    assert sorted(local.host_a) == [f"{h}:0" for h in hosts] and sorted(local.host_b) == [f"{h}:1" for h in hosts]
    assert verdict["local"] is not None and len(verdict["compute"]["gflops"]) == 8
    # Under torchrun a finding exits 0 (torchrun reports any exit 1 as a crash) and says where it is.
    assert verdict["flagged_hosts"] == [hosts[1]] and code == 0
    assert "# isolate: exit code 0 under torchrun" in text


def test_isolate_on_an_odd_number_of_hosts(cluster, tmp_path):
    shape(cluster, slow=cluster[2])
    code, verdict, text = isolate(cluster, tmp_path / "five.csv", "--bisect")
    print(verdict_lines(text))
    rows = pd.read_csv(tmp_path / "five.csv")
    pairs = rows[(rows.kind == "host_pair") & (rows.size_bytes > 8)]
    # 5 hosts: 10 pairs in 5 rounds of 2 (one host sits each round out), every pair once.
    assert len(pairs) == 10 and len({tuple(sorted(p)) for p in zip(pairs.host_a, pairs.host_b)}) == 10
    assert Counter(pairs["round"]) == {r: 2 for r in range(1, 6)}
    assert verdict["flagged_hosts"] == [cluster[2]] and code == 1
    # --bisect: all_reduce over hosts 1-2 and 3-4 at once; the half with the slow host is the slower.
    first = verdict["bisect"][0]
    assert first["halves"] == [cluster[:2], cluster[2:4]] and first["result"] == "half 2 is slower"


def test_isolate_names_a_slow_link_between_two_healthy_hosts(cluster, tmp_path):
    hosts = cluster[:4]
    shape(hosts)
    hosts_sh("link", hosts[0], hosts[2], SLOW, HEALTHY)
    try:
        code, verdict, text = isolate(hosts, tmp_path / "link.csv")
    finally:
        shape(hosts)
    print(verdict_lines(text))
    assert verdict["flagged_links"] == [[hosts[0], hosts[2]]], verdict_lines(text)
    assert verdict["flagged_hosts"] == [] and code == 1


def test_isolate_names_a_cpu_throttled_host_launched_as_the_docs_show(cluster, tmp_path):
    """docs/isolate.md's cluster: one torchrun node per host, OMP_NUM_THREADS unset (torch then runs
    one thread per core), one host under a CPU quota (cgroup cpu.max or v1's cfs quota). Its rank
    runs at full speed for 10 ms of every 100 ms, so only samples longer than a period catch it."""
    hosts = cluster[:4]
    shape(hosts)
    hosts_sh("cpu", hosts[2], CPU_QUOTA)
    try:
        code, verdict, text = isolate(hosts, tmp_path / "cpu.csv", torchrun=True, one_thread=False)
    finally:
        hosts_sh("cpu", hosts[2], "off")
    print(verdict_lines(text))
    compute = verdict["compute"]
    assert verdict["flagged_ranks"] == [2], verdict_lines(text)
    assert compute["flagged"] == [2] and compute["reference"] not in compute["suspects"]
    assert compute["gflops"][f"{hosts[2]}:0"] == min(compute["gflops"].values())
    assert verdict["flagged_links"] == [] and code == 0 and "# isolate: exit code 0 under torchrun" in text
