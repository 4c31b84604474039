"""Intra- vs inter-host groups over a shaped link: all_gather p50 of --group inter over --group intra.

Two hosts in network namespaces (scripts/two-hosts.sh: a veth pair limited to 1 Gbit/s, and a
200 us delay where the kernel has netem), one torchrun node of 2 ranks on each. Each round runs
a --group intra sweep and a --group inter sweep back to back (alternating which goes first); each
round gives one ratio per size, inter p50 / intra p50, and the median over rounds is reported.
intra groups never leave their host, so the ratio is what crossing the link costs. Needs root.

    sudo python bench/two_host_groups.py [--rounds 5] [--iters 10] [--sizes 64K,1M,4M]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.test_two_hosts import HOSTS, netns_unavailable, run_on_both_hosts, two_hosts_sh


def sweep(kind: str, sizes: str, iters: int, out: Path) -> pd.Series:
    run_on_both_hosts(f"sweep --op all_gather --variant flat --sizes {sizes} -n {iters} -w 2 --group {kind}", out)
    frame = pd.read_csv(out)
    assert (frame.status == "ok").all() and (frame.wrong == 0).all(), frame
    return frame.set_index("size_bytes").time_us_p50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--sizes", default="64K,1M,4M")
    opts = parser.parse_args()
    if (reason := netns_unavailable()) is not None:
        sys.exit(f"two_host_groups: {reason}")
    print(two_hosts_sh("up").stderr.strip().splitlines()[-1])
    ratios: dict[int, list[float]] = {}
    try:
        with tempfile.TemporaryDirectory() as folder:
            for r in range(opts.rounds):
                order = ("intra", "inter") if r % 2 == 0 else ("inter", "intra")
                p50 = {kind: sweep(kind, opts.sizes, opts.iters, Path(folder) / f"{r}-{kind}.csv") for kind in order}
                for size in p50["intra"].index:
                    ratios.setdefault(int(size), []).append(p50["inter"][size] / p50["intra"][size])
                print(f"round {r + 1}: " + ", ".join(f"{s}: {v[-1]:.2f}" for s, v in ratios.items()), flush=True)
    finally:
        two_hosts_sh("down", check=False)
    print(f"all_gather on {HOSTS[0]} + {HOSTS[1]}, 2 ranks each; p50 inter / intra, median of {opts.rounds} rounds:")
    for size, values in ratios.items():
        print(f"  {size:>9} bytes: {statistics.median(values):.2f} (rounds: {min(values):.2f} to {max(values):.2f})")


if __name__ == "__main__":
    main()
