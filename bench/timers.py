"""CUDA events against the synchronised host clock, on NCCL (a GPU machine only).

The same all_reduce is measured by the harness with three timers, in the same NCCL ranks,
interleaved round by round (the order rotates): CUDA events as commbench uses them ("lead": a
short device-side delay queued before the start event, so the collective's launch path is hidden
behind it), CUDA events without the delay ("event": the start event fires on an idle stream, so the
sample includes the launch), and synchronise + perf_counter ("clock"). Each round gives one p50 per
timer; the medians over rounds are reported per size, with two ratios: event/lead (what the delay
takes out of a sample: above 1 at small sizes if the launch path was inside it) and lead/clock
(below 1: the device synchronise and the host's wake-up the clock includes). With one GPU the ranks
are one, and the op is a local copy: the ratios then show the timers alone.

    python bench/timers.py [--ranks N (default: every visible GPU)] [--rounds 10] [--iters 50]
"""

from __future__ import annotations

import statistics
import sys

from ranks import RanksFailed, arguments, join_group, run_ranks

SIZES = [8, 1 << 10, 64 << 10, 1 << 20, 16 << 20]


def rank_main(rank: int, world: int, port: int, queue, rounds: int, iters: int) -> None:
    import torch

    from commbench.benchkit import (
        AllReduce,
        CollArgs,
        CudaEventTimer,
        PerfCounterTimer,
        Point,
        Watchdog,
        cuda_lead,
        measure,
    )

    backend = join_group(rank, world, port, "nccl")
    watchdog = Watchdog(300, rank)
    timers = {
        "lead": lambda b: CudaEventTimer(torch.cuda.Event, stream=torch.cuda.current_stream, lead=cuda_lead()),
        "event": lambda b: CudaEventTimer(torch.cuda.Event, stream=torch.cuda.current_stream),
        "clock": lambda b: PerfCounterTimer(b.clock),
    }
    op = AllReduce()
    results = []
    for size in SIZES:
        args = CollArgs(backend=backend, dtype=torch.float32, variant="flat")
        op.setup(args, Point.of_size(size))
        p50s: dict[str, list[float]] = {name: [] for name in timers}
        names = list(timers)
        for r in range(rounds):
            for which in names[r % 3 :] + names[: r % 3]:
                m = measure(
                    op,
                    args,
                    "comm",
                    iters=iters,
                    warmup=5,
                    window=1,
                    check=False,
                    watchdog=watchdog,
                    label="timers",
                    timer=timers[which](backend),
                )
                p50s[which].append(statistics.median(m.samples_us))
        medians = {name: statistics.median(values) for name, values in p50s.items()}
        removed = statistics.median([e / lead for e, lead in zip(p50s["event"], p50s["lead"])])
        versus_clock = statistics.median([lead / c for lead, c in zip(p50s["lead"], p50s["clock"])])
        results.append((size, medians["lead"], medians["event"], medians["clock"], removed, versus_clock))
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
    try:
        results = run_ranks(rank_main, opts.ranks, opts.rounds, opts.iters)
    except RanksFailed as exc:
        sys.exit(f"bench/timers.py: {exc}")
    print(
        f"# all_reduce on {opts.ranks} NCCL rank(s), {opts.rounds} interleaved rounds x {opts.iters} iters; p50 in us"
    )
    print(f"{'size':>10} {'lead':>9} {'event':>9} {'clock':>9} {'event/lead':>11} {'lead/clock':>11}")
    for size, lead, event, clock, removed, versus_clock in results:
        print(f"{size:>10} {lead:>9.1f} {event:>9.1f} {clock:>9.1f} {removed:>11.3f} {versus_clock:>11.3f}")


if __name__ == "__main__":
    main()
