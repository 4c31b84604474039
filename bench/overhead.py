"""Harness overhead: commbench's timed loop against a bare loop of the same collective calls.

Both run in the same two processes (pinned one per core), over sizes 8 B to 16 MB, as many short
blocks interleaved round by round (each taking its turn first, second and last): the harness
measures the case as a sweep does (one warm-up, then a block per round), the bare loop is barrier,
clock, call(s), wait(s), clock, and a second bare loop on buffers of its own runs beside them.
Each sample is the max over ranks of one iteration. Each round gives one ratio, harness p50 / bare
p50, from blocks that ran back to back and so saw nearly the same machine state; the median of many
such ratios is what a shared machine cannot move much, where one long block each is at the mercy of
whatever else runs. The spread of the per-round ratios (p10..p90) says how far one round alone
could be off, and the median of bare/bare (two identical loops) is the floor: a harness/bare median
cannot be read more finely than bare/bare is from 1. Target: the median <= 1.02 at every size.

- Gloo (default): all_gather flat; the bare call is torch.distributed's flat all-gather and wait.
- `--window 8`: non-blocking mode, 8 all-gathers issued back to back, then all waited on; both
  sides report the time per op (the sample / 8).
- `--backend horovod`, under `horovodrun -np 2 -H localhost:2 --gloo --network-interface lo`: the
  bare call is hvd.allgather_async under a fixed name, hvd.synchronize and the copy of the result
  into the output (what the harness's Horovod wait object does, and part of the op's time).

    python bench/overhead.py [--ranks 2] [--rounds 60] [--iters 10] [--window 1]
    horovodrun -np 2 -H localhost:2 --gloo --network-interface lo python bench/overhead.py --backend horovod
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from ranks import arguments, join_group, run_ranks

SIZES = [8, 64, 512, 4 << 10, 32 << 10, 256 << 10, 2 << 20, 16 << 20]


def gloo_bare(backend: Any, out: torch.Tensor, inp: torch.Tensor, window: int) -> Callable[[int], list[float]]:
    """barrier, clock, `window` calls, their waits, clock: nothing else (us per op)."""
    import torch.distributed as dist

    fn = getattr(dist, backend.flat_all_gather)

    def loop(iters: int) -> list[float]:
        times = []
        for _ in range(iters):
            dist.barrier()
            start = time.perf_counter()
            works = [fn(out, inp, async_op=True) for _ in range(window)]
            for work in works:
                work.wait()
            times.append((time.perf_counter() - start) * 1e6 / window)
        return times

    return loop


def horovod_bare(backend: Any, out: torch.Tensor, inp: torch.Tensor, window: int) -> Callable[[int], list[float]]:
    """barrier, clock, `window` allgather_async under fixed names, synchronize and copy each, clock."""
    hvd = backend.hvd
    names = [f"bare.{i}" for i in range(window)]

    def loop(iters: int) -> list[float]:
        times = []
        for _ in range(iters):
            hvd.barrier()
            start = time.perf_counter()
            handles = [hvd.allgather_async(inp, name=name) for name in names]
            for handle in handles:
                out.copy_(hvd.synchronize(handle))
            times.append((time.perf_counter() - start) * 1e6 / window)
        return times

    return loop


def measure_pairs(backend: Any, pairs: int, iters: int, window: int) -> list[tuple[float, ...]]:
    """Per size: harness p50, bare p50, the median, p10 and p90 of the per-pair ratios harness/bare,
    and the median of bare/bare: a second bare loop on buffers of its own (the A/A floor: what two
    identical loops differ by here, so the noise a harness/bare median cannot see below)."""
    from commbench.ops.all_gather import AllGather
    from commbench.ops.args import CollArgs
    from commbench.ops.base import Point
    from commbench.run.harness import TimedCase
    from commbench.run.watchdog import Watchdog

    bare_for = horovod_bare if backend.name == "horovod" else gloo_bare
    watchdog = Watchdog(300, backend.rank)
    op = AllGather()
    kinds = ("harness", "bare", "again")
    results = []
    for size in SIZES:
        args = CollArgs(backend=backend, dtype=torch.float32, variant="flat")
        op.setup(args, Point.of_size(size))
        loops = {kind: bare_for(backend, args.output.clone(), args.input.clone(), window) for kind in kinds[1:]}
        for loop in loops.values():
            loop(3)  # warm-up, as the harness does
        case = TimedCase(op, args, "comm", window=window, watchdog=watchdog, label="overhead")
        case.warm_up(3)
        ratios: list[float] = []
        floor: list[float] = []
        bare_all: list[float] = []
        for pair in range(pairs):
            p50 = {}
            for which in kinds[pair % 3 :] + kinds[: pair % 3]:  # each goes first, second and last in turn
                if which == "harness":
                    case.block(iters, pair, check=pair == pairs - 1)
                    p50[which] = statistics.median(case.rounds_us[pair])
                else:
                    local = loops[which](iters)
                    samples = [max(col) for col in zip(*backend.all_gather_object(local))]
                    bare_all += samples if which == "bare" else []
                    p50[which] = statistics.median(samples)
            ratios.append(p50["harness"] / p50["bare"])
            floor.append(p50["again"] / p50["bare"])
        assert case.wrong == 0
        deciles = statistics.quantiles(ratios, n=10)
        harness, bare_p50 = statistics.median(case.samples_us), statistics.median(bare_all)
        results.append(
            (size, harness, bare_p50, statistics.median(ratios), deciles[0], deciles[-1], statistics.median(floor))
        )
    return results


def rank_main(rank: int, world: int, port: int, queue: Any, pairs: int, iters: int, window: int) -> None:
    backend = join_group(rank, world, port)
    results = measure_pairs(backend, pairs, iters, window)
    if rank == 0:
        queue.put(results)
    backend.close()


def horovod_rank(pairs: int, iters: int, window: int) -> tuple[list[tuple[float, ...]] | None, int]:
    """This process as a horovodrun rank, pinned and single-threaded as the Gloo ranks are."""
    from commbench.backends.horovod import HorovodBackend
    from commbench.launch.env import detect

    torch.set_num_threads(1)
    backend = HorovodBackend()
    backend.init(300, detect())
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {backend.rank % (os.cpu_count() or 1)})
    try:
        results = measure_pairs(backend, pairs, iters, window)
        return (results if backend.rank == 0 else None), backend.world_size
    finally:
        backend.close()


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--window", type=int, default=1, help="ops per sample (> 1: non-blocking mode)")
    parser.add_argument("--backend", choices=("gloo", "horovod"), default="gloo")
    parser.set_defaults(rounds=60, iters=10)  # rounds: triplets of adjacent blocks
    opts = parser.parse_args()
    if opts.backend == "horovod":
        results, ranks = horovod_rank(opts.rounds, opts.iters, opts.window)
        if results is None:
            return
    else:
        results = run_ranks(rank_main, opts.ranks, opts.rounds, opts.iters, opts.window)
        ranks = opts.ranks
    mode = "blocking" if opts.window == 1 else f"nonblocking, window {opts.window} (time per op)"
    print(
        f"# all_gather (flat) on {ranks} {opts.backend} ranks, {mode}, "
        f"{opts.rounds} interleaved rounds of {opts.iters}-iteration blocks (harness, bare, bare again)"
    )
    print("# harness/bare: the median over rounds of (harness block p50 / adjacent bare block p50);")
    print("# bare/bare: the same for a second bare loop (the A/A floor: identical loops differ this much here)")
    print(
        f"{'size':>10} {'harness p50 (us)':>17} {'bare p50 (us)':>14} {'harness/bare':>13} "
        f"{'rounds p10..p90':>16} {'bare/bare':>10}"
    )
    worst, floor = 0.0, 0.0
    for size, harness, bare, ratio, p10, p90, again in results:
        worst, floor = max(worst, ratio), max(floor, abs(again - 1))
        print(f"{size:>10} {harness:>17.1f} {bare:>14.1f} {ratio:>13.3f} {p10:>8.2f}..{p90:<7.2f} {again:>10.3f}")
    print(f"# worst harness/bare {worst:.3f} (target <= 1.02); bare/bare within {1 - floor:.3f}..{1 + floor:.3f}")


if __name__ == "__main__":
    main()
