"""Harness overhead: commbench's timed loop against a bare loop of the same collective.

Both run in the same two Gloo processes (pinned one per core), over sizes 8 B to 16 MB, as many short blocks interleaved
pair by pair (alternating which goes first): the harness measures the case as a sweep does (one
warm-up, then a block per round), the bare loop is barrier, clock, call, wait, clock. Each sample
is the max over ranks of one iteration. Each pair of adjacent blocks gives one ratio, harness p50 /
bare p50, from two blocks that ran back to back and so saw nearly the same machine state; the median
of many such ratios is what a shared machine cannot move much, where one long block each is at the
mercy of whatever else runs. The spread of the per-pair ratios (p10..p90) says how far one pair
alone could be off. Target: the median <= 1.05 at every size.

    python bench/overhead.py [--ranks 2] [--rounds 60] [--iters 10]
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist
from ranks import arguments, join_group, run_ranks

SIZES = [8, 64, 512, 4 << 10, 32 << 10, 256 << 10, 2 << 20, 16 << 20]


def bare_loop(backend, out: torch.Tensor, inp: torch.Tensor, iters: int) -> list[float]:
    """barrier, clock, call, wait, clock: nothing else."""
    fn = getattr(dist, backend.flat_all_gather)
    times = []
    for _ in range(iters):
        dist.barrier()
        start = time.perf_counter()
        fn(out, inp, async_op=True).wait()
        times.append((time.perf_counter() - start) * 1e6)
    return times


def rank_main(rank: int, world: int, port: int, queue, pairs: int, iters: int) -> None:
    from commbench.ops.all_gather import AllGather
    from commbench.ops.base import Point
    from commbench.run.harness import Case, CollArgs
    from commbench.run.watchdog import Watchdog

    backend = join_group(rank, world, port)
    watchdog = Watchdog(300, rank)
    op = AllGather()
    results = []
    for size in SIZES:
        args = CollArgs(backend=backend, dtype=torch.float32, variant="flat")
        op.setup(args, Point.of_size(size))
        bare_in, bare_out = args.input.clone(), args.output.clone()
        bare_loop(backend, bare_out, bare_in, 3)  # warm-up, as the harness does
        case = Case(op, args, "comm", window=1, watchdog=watchdog, label="overhead")
        case.warm_up(3)
        ratios: list[float] = []
        bare_all: list[float] = []
        for pair in range(pairs):
            order = ("harness", "bare") if pair % 2 == 0 else ("bare", "harness")
            p50 = {}
            for which in order:
                if which == "harness":
                    case.block(iters, pair, check=pair == pairs - 1)
                    p50[which] = statistics.median(case.rounds_us[pair])
                else:
                    local = bare_loop(backend, bare_out, bare_in, iters)
                    samples = [max(col) for col in zip(*backend.all_gather_object(local))]
                    bare_all += samples
                    p50[which] = statistics.median(samples)
            ratios.append(p50["harness"] / p50["bare"])
        assert case.wrong == 0
        deciles = statistics.quantiles(ratios, n=10)
        harness, bare = statistics.median(case.samples_us), statistics.median(bare_all)
        results.append((size, harness, bare, statistics.median(ratios), deciles[0], deciles[-1]))
    if rank == 0:
        queue.put(results)
    backend.close()


def main() -> None:
    parser = arguments(__doc__)
    parser.set_defaults(rounds=60, iters=10)  # rounds: pairs of adjacent blocks
    opts = parser.parse_args()
    results = run_ranks(rank_main, opts.ranks, opts.rounds, opts.iters)
    print(
        f"# all_gather (flat) on {opts.ranks} Gloo ranks, {opts.rounds} interleaved pairs of {opts.iters}-iteration blocks"
    )
    print("# harness/bare: the median over pairs of (harness block p50 / adjacent bare block p50)")
    print(f"{'size':>10} {'harness p50 (us)':>17} {'bare p50 (us)':>14} {'harness/bare':>13} {'pairs p10..p90':>15}")
    worst = 0.0
    for size, harness, bare, ratio, p10, p90 in results:
        worst = max(worst, ratio)
        print(f"{size:>10} {harness:>17.1f} {bare:>14.1f} {ratio:>13.3f} {p10:>7.2f}..{p90:<7.2f}")
    print(f"# worst harness/bare {worst:.3f} (target <= 1.05)")


if __name__ == "__main__":
    main()
