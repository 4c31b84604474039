"""Group creation in `commbench isolate`'s rounds, before and after groups are kept between rounds.

On N Gloo ranks (one per "host"), the calls a node sweep makes in turn: the size probe's repeats on
the first round's pairs (--probe-runs), then the first --rounds circle rounds. Each call's group
creation time is the slowest rank's. `before` creates every call's groups anew (as isolate did);
`after` is Rounds as it is: a call that forms the last call's groups keeps them, and creation is one
split_group where the transport splits (NCCL with a bound device; not Gloo, which keeps one new_group
per group). Both run in one launch, side by side, so their ratio is what matters on a busy host.

    python bench/isolate_groups.py [--ranks 16] [--probe-runs 6] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from commbench.benchkit import Rounds, SweepConfig, Watchdog, circle_rounds
from tests.support.distributed import run_ranks


class CreatingEveryCall(Rounds):
    """isolate's rounds before: every call creates its groups (and frees them after)."""

    def _my_group(self, groups):  # type: ignore[no-untyped-def]
        self._release()
        return super()._my_group(groups)


def calls(backend, probe_runs: int, rounds: int) -> dict[str, list[float]]:  # type: ignore[no-untyped-def]
    schedule = circle_rounds(backend.world_size)
    sequence = [schedule[0]] * probe_runs + schedule[:rounds]
    cfg = SweepConfig("gloo", ("sendrecv",), (64,), iters=1, warmup=0)
    found = {}
    for name, kind in (("before", CreatingEveryCall), ("after", Rounds)):
        runner = kind(backend, cfg, Watchdog(600, backend.rank))
        times = []
        for pairs in sequence:
            groups = [list(p) for p in pairs]
            created = len(runner.creation_s)
            runner.run(groups, [64], "isolate_groups", iters=1, groups=groups)
            times.append(runner.creation_s[-1] if len(runner.creation_s) > created else 0.0)
        runner._release()
        found[name] = times
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=16)
    parser.add_argument("--probe-runs", type=int, default=6, help="the size probe's calls: latency size, then 64K up")
    parser.add_argument("--rounds", type=int, default=3)
    opts = parser.parse_args()
    by_rank = run_ranks(calls, opts.ranks, opts.probe_runs, opts.rounds, timeout=1200)
    labels = [f"probe {i + 1}" for i in range(opts.probe_runs)] + [f"round {i + 1}" for i in range(opts.rounds)]
    print(
        f"# {opts.ranks} Gloo ranks; group creation per call, slowest rank (s); load {Path('/proc/loadavg').read_text().split()[0]}"
    )
    print(f"{'call':<10} {'before':>8} {'after':>8}")
    totals = {}
    for name in ("before", "after"):
        totals[name] = [max(column) for column in zip(*(r[name] for r in by_rank))]
    for i, label in enumerate(labels):
        print(f"{label:<10} {totals['before'][i]:8.3f} {totals['after'][i]:8.3f}")
    distinct = [t for t in totals["before"][opts.probe_runs + 1 :]]
    print(
        f"total: before {sum(totals['before']):.2f} s, after {sum(totals['after']):.2f} s "
        f"(after/before {sum(totals['after']) / sum(totals['before']):.2f}); a round of new pairs: "
        f"median {statistics.median(distinct) if distinct else float('nan'):.3f} s before"
    )


if __name__ == "__main__":
    main()
