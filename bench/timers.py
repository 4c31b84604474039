"""CUDA events against the synchronised host clock, on NCCL (a GPU machine only).

The same all_reduce is measured by the harness with each timer, in the same NCCL ranks, interleaved
round by round (alternating which goes first). Each round gives one ratio, event p50 / clock p50;
the median over rounds is reported per size. Below 1 at small sizes: the device synchronises and
the host's wake-up the clock timer includes; about 1 at large sizes, where the collective dominates.
With one GPU the ranks are one, and the op is a local copy: the ratio then shows the timers alone.

    python bench/timers.py [--ranks N (default: every visible GPU)] [--rounds 10] [--iters 50]
"""

from __future__ import annotations

import statistics
import sys

from ranks import arguments, join_group, run_ranks

SIZES = [8, 1 << 10, 64 << 10, 1 << 20, 16 << 20]


def rank_main(rank: int, world: int, port: int, queue, rounds: int, iters: int) -> None:
    import torch

    import commbench.run.harness as harness
    from commbench.ops.all_reduce import AllReduce
    from commbench.ops.base import Point
    from commbench.run.timers import CudaEventTimer, PerfCounterTimer
    from commbench.run.watchdog import Watchdog

    backend = join_group(rank, world, port, "nccl")
    watchdog = Watchdog(300, rank)
    timers = {
        "event": lambda b: CudaEventTimer(torch.cuda.Event, stream=torch.cuda.current_stream),
        "clock": lambda b: PerfCounterTimer(b.clock),
    }
    op = AllReduce()
    results = []
    for size in SIZES:
        args = harness.CollArgs(backend=backend, dtype=torch.float32, variant="flat")
        op.setup(args, Point.of_size(size))
        p50s: dict[str, list[float]] = {"event": [], "clock": []}
        for r in range(rounds):
            for which in ("event", "clock") if r % 2 == 0 else ("clock", "event"):
                harness.timer_for = timers[which]  # measure() asks for its timer here
                m = harness.measure(
                    op, args, "comm", iters=iters, warmup=5, window=1, check=False, watchdog=watchdog, label="timers"
                )
                p50s[which].append(statistics.median(m.samples_us))
        ratios = [e / c for e, c in zip(p50s["event"], p50s["clock"])]
        results.append(
            (size, statistics.median(p50s["event"]), statistics.median(p50s["clock"]), statistics.median(ratios))
        )
    if rank == 0:
        queue.put(results)
    backend.close()


def main() -> None:
    import torch

    if not torch.cuda.is_available():
        sys.exit("bench/timers.py needs a CUDA GPU (it compares CUDA events with the host clock on NCCL)")
    parser = arguments(__doc__)
    parser.set_defaults(ranks=torch.cuda.device_count(), iters=50)
    opts = parser.parse_args()
    results = run_ranks(rank_main, opts.ranks, opts.rounds, opts.iters)
    print(f"# all_reduce on {opts.ranks} NCCL rank(s), {opts.rounds} interleaved rounds x {opts.iters} iters")
    print(f"{'size':>10} {'event p50 (us)':>15} {'clock p50 (us)':>15} {'event/clock (median of rounds)':>32}")
    for size, event, clock, ratio in results:
        print(f"{size:>10} {event:>15.1f} {clock:>15.1f} {ratio:>32.3f}")


if __name__ == "__main__":
    main()
