"""Harness overhead: commbench's timed loop against a bare loop of the same collective.

Both run in the same two Gloo processes, interleaved round by round (alternating which goes
first), over sizes 8 B to 16 MB. Each sample is the max over ranks of one iteration, as the
harness reports it. Each round gives one ratio, harness p50 / bare p50, from blocks measured
back to back; the median over rounds is reported, so slow drifts of a shared machine cancel.
Target: <= 1.05 at every size.

    python bench/overhead.py [--ranks 2] [--rounds 10] [--iters 20]
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


def rank_main(rank: int, world: int, port: int, queue, rounds: int, iters: int) -> None:
    from commbench.ops.all_gather import AllGather
    from commbench.ops.base import Point
    from commbench.run.harness import CollArgs, measure
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
        harness_us: list[float] = []
        bare_us: list[float] = []
        ratios: list[float] = []
        for r in range(rounds):
            order = ("harness", "bare") if r % 2 == 0 else ("bare", "harness")
            for which in order:
                if which == "harness":
                    m = measure(
                        op,
                        args,
                        "comm",
                        iters=iters,
                        warmup=3,
                        window=1,
                        check=True,
                        watchdog=watchdog,
                        label="overhead",
                    )
                    assert m.wrong == 0
                    harness_us += m.samples_us
                else:
                    local = bare_loop(backend, bare_out, bare_in, iters)
                    everyone = backend.all_gather_object(local)
                    bare_us += [max(col) for col in zip(*everyone)]
            ratios.append(statistics.median(harness_us[-iters:]) / statistics.median(bare_us[-iters:]))
        results.append((size, statistics.median(harness_us), statistics.median(bare_us), statistics.median(ratios)))
    if rank == 0:
        queue.put(results)
    backend.close()


def main() -> None:
    parser = arguments(__doc__)
    opts = parser.parse_args()
    results = run_ranks(rank_main, opts.ranks, opts.rounds, opts.iters)
    print(f"# all_gather (flat) on {opts.ranks} Gloo ranks, {opts.rounds} interleaved rounds x {opts.iters} iters")
    print(f"{'size':>10} {'harness p50 (us)':>18} {'bare p50 (us)':>15} {'harness/bare (median of rounds)':>32}")
    worst = 0.0
    for size, harness, bare, ratio in results:
        worst = max(worst, ratio)
        print(f"{size:>10} {harness:>18.1f} {bare:>15.1f} {ratio:>32.3f}")
    print(f"# worst ratio {worst:.3f} (target <= 1.05)")


if __name__ == "__main__":
    main()
