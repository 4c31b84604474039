"""Two real hosts: torchrun nodes in two network namespaces, joined by a veth pair (scripts/two-hosts.sh).

Each namespace is its own host (own network stack and host name); the only link between them
is the veth pair, whose addresses (198.18.0.1 and .2, the benchmarking range) exist only inside
the namespaces. Gloo is bound to that link, so every byte between the two nodes crosses it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.support.distributed import REPO

SCRIPT = REPO / "scripts" / "two-hosts.sh"
PREFIX = "cbt"  # hosts cbt1 and cbt2, so a developer's own cbh1/cbh2 from the script are left alone
HOSTS = (f"{PREFIX}1", f"{PREFIX}2")
IFACE = "cb0"

pytestmark = pytest.mark.slow


def netns_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "tc", "unshare"):
        if shutil.which(tool) is None:
            return f"no '{tool}' here (iproute2, util-linux)"
    if subprocess.run(["ip", "netns", "list"], capture_output=True).returncode != 0:
        return "`ip netns` is not available here"
    return None


def two_hosts_sh(*args: str, check: bool = True, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        check=check,
        env={**os.environ, "TWO_HOSTS_PREFIX": PREFIX},
        timeout=60,
        **kwargs,
    )


def _namespaces() -> set[str]:
    return {
        line.split()[0]
        for line in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.splitlines()
    }


@pytest.fixture
def two_hosts():
    if (reason := netns_unavailable()) is not None:
        pytest.skip(reason)
    two_hosts_sh("down", check=False)  # what a run killed before its teardown left behind would stop `up`
    try:
        up = two_hosts_sh("up")
        yield up.stderr
    finally:
        two_hosts_sh("down", check=False)
        assert not set(HOSTS) & _namespaces(), "two-hosts.sh down left a namespace behind"


def _link_bytes(host: str) -> tuple[int, int]:
    """(received, sent) bytes on the host's end of the veth pair."""
    text = subprocess.run(
        ["ip", "-n", host, "-s", "link", "show", IFACE], capture_output=True, text=True, check=True
    ).stdout
    numbers = [line.split() for line in text.splitlines()]
    rx = next(i for i, words in enumerate(numbers) if words and words[0] == "RX:") + 1
    tx = next(i for i, words in enumerate(numbers) if words and words[0] == "TX:") + 1
    return int(numbers[rx][0]), int(numbers[tx][0])


def test_the_hosts_are_reachable_only_from_each_other(two_hosts):
    # This machine's own namespace never holds the benchmark addresses or the link.
    own = subprocess.run(["ip", "-br", "addr"], capture_output=True, text=True, check=True).stdout
    assert "198.18." not in own and f"{IFACE}" not in own
    for i, host in enumerate(HOSTS, start=1):
        addrs = subprocess.run(["ip", "-n", host, "-br", "addr"], capture_output=True, text=True, check=True).stdout
        assert sorted(line.split()[0].split("@")[0] for line in addrs.splitlines()) == [IFACE, "lo"]
        assert f"198.18.0.{i}/24" in addrs
        routes = subprocess.run(["ip", "-n", host, "route"], capture_output=True, text=True, check=True).stdout
        assert [r.split()[0] for r in routes.splitlines()] == ["198.18.0.0/24"]  # no default route: nowhere else to go
    names = two_hosts_sh("run", HOSTS[1], "sh", "-c", "hostname; getent hosts " + HOSTS[0]).stdout.split()
    assert names == [HOSTS[1], "198.18.0.1", HOSTS[0]]
    assert "link:" in two_hosts  # `up` says how the link is shaped (netem, or tbf where the kernel has no netem)


def run_on_both_hosts(sweep: str, out: Path) -> list[tuple[str, str]]:
    """One torchrun node of 2 ranks per host, rendezvousing over the link; each node's (stdout, stderr)."""
    env = {**os.environ, "TWO_HOSTS_PREFIX": PREFIX, "GLOO_SOCKET_IFNAME": IFACE, "OMP_NUM_THREADS": "1"}
    torchrun = "-m torch.distributed.run --nnodes 2 --nproc-per-node 2 --rdzv-backend static"
    nodes = [
        subprocess.Popen(
            [
                *f"bash {SCRIPT} run {host} {sys.executable} {torchrun} --node-rank {node}".split(),
                *f"--master-addr 198.18.0.1 --master-port 29500 -m commbench {sweep} --no-plot -o {out}".split(),
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for node, host in enumerate(HOSTS)
    ]
    try:
        results = [node.communicate(timeout=300) for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
                node.wait()
    assert [n.returncode for n in nodes] == [0, 0], "\n".join(o[-2000:] + e[-2000:] for o, e in results)
    return results


GROUP_SIZES = (64 * 1024, 1 << 20, 4 << 20)


def test_two_torchrun_nodes_on_two_hosts_in_intra_and_inter_host_groups(two_hosts, tmp_path):
    """torchrun --nnodes 2 across the link, once per --group: intra groups stay inside each host,
    inter groups cross the link, and only they load it."""
    frames, crossed = {}, {}
    sizes = ",".join(str(s) for s in GROUP_SIZES)
    for kind in ("intra", "inter"):
        out = tmp_path / f"{kind}.csv"
        before = _link_bytes(HOSTS[0])
        results = run_on_both_hosts(
            f"sweep --op all_gather --variant flat --sizes {sizes} -n 5 -w 1 --group {kind}", out
        )
        crossed[kind] = sum(now - then for now, then in zip(_link_bytes(HOSTS[0]), before))
        frames[kind] = frame = pd.read_csv(out)
        assert (frame.status == "ok").all() and (frame.wrong == 0).all()
        assert set(frame.hosts) == {";".join(HOSTS)}
        assert set(frame.node_ranks) == {f"0-1@{HOSTS[0]}/0;2-3@{HOSTS[1]}/1"}
        assert set(frame.group) == {kind} and set(frame.group_size) == {2} and set(frame.world_size) == {4}
        assert list(frame.size_bytes) == list(GROUP_SIZES)
        assert "# done: results in" in results[0][0] and "# done" not in results[1][0]  # node 0 alone writes
    # Each inter group moves half of S each way per all_gather, over (1 warm-up, whose result the check counts,
    # + 5 timed) iterations,
    # and two groups share the link; intra groups send only the control traffic (barriers, results) across.
    moved = sum(GROUP_SIZES) // 2 * 6 * 2 * 2
    assert crossed["inter"] > moved, crossed
    assert crossed["intra"] < moved / 20, crossed
    print(f"hosts={frame.hosts.iloc[0]} node_ranks={frame.node_ranks.iloc[0]}")
    print(f"bytes across the link: intra {crossed['intra']}, inter {crossed['inter']}")
    intra, inter = (frames[k].set_index("size_bytes").time_us_p50 for k in ("intra", "inter"))
    for size in GROUP_SIZES:
        print(
            f"all_gather {size} bytes: intra {intra[size]:.1f} us, inter {inter[size]:.1f} us, inter/intra {inter[size] / intra[size]:.2f}"
        )
