"""commbench's per-row control cost and memory against the world size: before and after.

"Control" is everything between timed blocks that a row costs: the exchange of the block's samples
(and the check's wrong count) and the Python work around it. One row here is --max-iters' default
1,000 samples in 3 rounds (blocks of 334, 333 and 333), the last one checked, as a default sweep's
largest rows are. On 2, 4, 8 and 16 real Gloo ranks, each rank times three ways of sharing the
same recorded samples, interleaved rep by rep in the same processes:

- before: commbench 01ee5cb's exchange, kept here only: every rank all_gather_objects its
  (samples, wrong, overlap) and takes the per-iteration max over ranks in Python, holding every
  rank's samples (per_rank_us);
- after: TimedCase._share_block as a sweep runs it: one all_reduce(MAX) of the samples, one
  all_reduce(SUM) of the wrong count on the checked block, nothing kept per rank;
- after --raw: the same, plus every rank's samples gathered to rank 0 (the one consumer of
  per_rank_us is --raw's samples file).

A row's cost is the max over ranks of each rank's wall time for it, and of its CPU time (every
thread of the process: pickling, the max over ranks, Gloo's copies), which a rank spends whatever
the network does; reported are the median over reps of each, and the median of the per-rep ratio
before / after (pairs that ran back to back). On a host with fewer cores than ranks the wall time
is mostly waiting for descheduled peers; the CPU time is the work that grows with the data. The
growth with the world size is fitted (least squares, cost = a + b x ranks) and projected to 1,024
and 8,192 ranks: a PROJECTION from one host, whose cores run the ranks oversubscribed. The bytes
a rank receives per row (payload only) are computed, not measured: before, world x the pickled
samples per block; after, 8 bytes per sample (a reduction's result).

Memory (per rank, one row, tracemalloc: Python objects, not torch's tensor buffers): what the case
holds after the row (retained) and the peak during it; fitted and projected alike.

Then, in this one process, the rank-local work each way does per row at --simulate worlds (1,024
and 8,192 by default), measured rather than projected: before, unpickling the world's
all_gather_object messages (every rank's samples) and the Python reduction over them; after,
building the float64 tensor a reduction sends and reading its result back. The network is left
out (on one host it cannot be), and so is pickling one's own message (the same in both).

    python bench/scale_control.py [--worlds 2 4 8 16] [--reps 15] [--iters 1000] [--simulate 1024 8192]
"""

from __future__ import annotations

import math
import pickle
import random
import statistics
import time
import tracemalloc
from typing import Any

from ranks import arguments, join_group, run_ranks

WAYS = ("before", "after", "after --raw")


class OldCase:
    """commbench 01ee5cb's TimedCase.block after its timed loop (the before path, kept in this bench only)."""

    def __init__(self) -> None:
        self.rounds_us: list[list[float]] = []
        self.per_rank_us: list[list[float]] = []
        self.wrong = -1

    def share(self, backend: Any, local_us: list[float], round_index: int, wrong: int | None) -> None:
        gathered = backend.all_gather_object((local_us, -1 if wrong is None else wrong, None))
        self.per_rank_us += [[] for _ in range(len(gathered) - len(self.per_rank_us))]
        for rank, (samples, _, _) in enumerate(gathered):
            self.per_rank_us[rank].extend(samples)
        if len(self.rounds_us) <= round_index:
            self.rounds_us.append([])
        self.rounds_us[round_index].extend(max(column) for column in zip(*(g[0] for g in gathered)))
        if wrong is not None:
            self.wrong = sum(g[1] for g in gathered)


def rank_main(rank: int, world: int, port: int, queue: Any, reps: int, iters: int) -> None:
    import torch

    from commbench.benchkit import AllReduce, CollArgs, Point, TimedCase, Watchdog, blocks

    backend = join_group(rank, world, port)
    watchdog = Watchdog(300, rank)
    op = AllReduce()
    args = CollArgs(backend=backend, dtype=torch.float32, variant="flat")
    op.setup(args, Point.of_size(8))
    rng = random.Random(rank)
    row = [[rng.uniform(20.0, 80.0) for _ in range(n)] for n in blocks(iters, 3)]

    def one_row(way: str) -> Any:
        if way == "before":
            case: Any = OldCase()
            for r, local in enumerate(row):
                case.share(backend, local, r, 0 if r == len(row) - 1 else None)
            return case
        case = TimedCase(op, args, "comm", window=1, watchdog=watchdog, label="row", keep_per_rank=way == "after --raw")
        for r, local in enumerate(row):
            wrong = 0 if r == len(row) - 1 else None
            case._share(lambda local=local, r=r, wrong=wrong: case._share_block(local, r, None, wrong))
        return case

    for way in WAYS:  # warm every path up once
        one_row(way)
    times: dict[str, list[float]] = {w: [] for w in WAYS}
    cpu: dict[str, list[float]] = {w: [] for w in WAYS}
    for rep in range(reps):
        order = WAYS if rep % 2 == 0 else tuple(reversed(WAYS))
        for way in order:
            backend.barrier()
            start, start_cpu = time.perf_counter(), time.process_time()
            one_row(way)
            elapsed, spent = time.perf_counter() - start, time.process_time() - start_cpu
            wall_max, cpu_max = backend.reduce_floats([elapsed, spent], "max")  # untimed: the row's cost
            times[way].append(wall_max)
            cpu[way].append(cpu_max)
    memory: dict[str, tuple[float, float]] = {}
    local: dict[str, list[float]] = {}
    tracemalloc.start()  # once: stopping it between rows crashed a rank's next torch call (a segfault)
    for way in WAYS:
        backend.barrier()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        case = one_row(way)
        held, peak = tracemalloc.get_traced_memory()
        local[way] = [float(held - base), float(peak - base)]
        del case
    for way in WAYS:  # every rank's largest is the per-rank figure (rank 0's, with --raw's samples)
        memory[way] = tuple(backend.reduce_floats(local[way], "max"))  # type: ignore[assignment]
    tracemalloc.stop()
    received = {
        "before": world * sum(len(pickle.dumps((local, 0, None))) for local in row),
        "after": 8 * (iters + 1),
    }
    if rank == 0:
        queue.put({"times": times, "cpu": cpu, "memory": memory, "received": received})
    backend.close()


def local_work(world: int, iters: int) -> dict[str, tuple[float, float, float]]:
    """Per way: (seconds, bytes held after, peak bytes) of one row's rank-local control work when the
    world has `world` ranks, on synthetic samples (the same values on every simulated rank)."""
    import torch

    from commbench.benchkit import blocks, extend_round

    rng = random.Random(0)
    row = [[rng.uniform(20.0, 80.0) for _ in range(n)] for n in blocks(iters, 3)]
    messages = [pickle.dumps((local, 0 if r == len(row) - 1 else -1, None)) for r, local in enumerate(row)]

    def before() -> Any:
        case = OldCase()
        for r, message in enumerate(messages):
            gathered = [pickle.loads(message) for _ in range(world)]  # what all_gather_object unpickles
            case.per_rank_us += [[] for _ in range(len(gathered) - len(case.per_rank_us))]
            for rank, (samples, _, _) in enumerate(gathered):
                case.per_rank_us[rank].extend(samples)
            if len(case.rounds_us) <= r:
                case.rounds_us.append([])
            case.rounds_us[r].extend(max(column) for column in zip(*(g[0] for g in gathered)))
            del gathered
        return case

    def after() -> Any:
        rounds: list[list[float]] = []
        for r, local in enumerate(row):  # the tensor a reduction sends; its result read back
            extend_round(rounds, r, torch.tensor(local, dtype=torch.float64).tolist())
        torch.tensor([0.0], dtype=torch.float64).tolist()  # the wrong count's
        return rounds

    found = {}
    for way, fn in (("before", before), ("after", after)):
        seconds = math.inf
        for _ in range(3):  # the least of three: a shared host only ever adds time
            start = time.perf_counter()
            fn()
            seconds = min(seconds, time.perf_counter() - start)
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        kept = fn()
        held, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        del kept
        found[way] = (seconds, float(held - base), float(peak - base))
    return found


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares y = a + b x."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def main() -> None:
    parser = arguments(__doc__)
    parser.set_defaults(ranks=None, iters=1000)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--worlds", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--simulate", type=int, nargs="*", default=[1024, 8192])
    args = parser.parse_args()
    worlds = args.worlds if args.ranks is None else [args.ranks]
    print(f"# one row: {args.iters} samples in 3 rounds, checked; {args.reps} reps per way, interleaved")
    print(
        f"{'ranks':>5} | wall ms: {'before':>7} {'after':>7} {'raw':>7} {'ratio':>6} | cpu ms: {'before':>7} "
        f"{'after':>7} {'raw':>7} {'ratio':>6} | held KiB: {'before':>7} {'after':>6} {'raw':>7} | "
        f"peak KiB: {'before':>7} {'after':>6} | recv KiB: {'before':>7} {'after':>5}"
    )
    series: dict[str, dict[str, list[float]]] = {k: {w: [] for w in WAYS} for k in ("wall", "cpu", "held")}
    for world in worlds:
        out = run_ranks(rank_main, world, args.reps, args.iters)
        memory, received = out["memory"], out["received"]
        ratios = {
            k: statistics.median(b / a for b, a in zip(out[key]["before"], out[key]["after"]))
            for k, key in (("wall", "times"), ("cpu", "cpu"))
        }
        for way in WAYS:
            series["wall"][way].append(statistics.median(out["times"][way]) * 1e3)
            series["cpu"][way].append(statistics.median(out["cpu"][way]) * 1e3)
            series["held"][way].append(memory[way][0] / 1024)
        wall, cpu, held = (" ".join(f"{series[k][w][-1]:>7.2f}" for w in WAYS) for k in ("wall", "cpu", "held"))
        print(
            f"{world:>5} | wall ms: {wall} {ratios['wall']:>6.2f} | cpu ms: {cpu} {ratios['cpu']:>6.2f} | "
            f"held KiB: {held} | peak KiB: {memory['before'][1] / 1024:>7.1f} {memory['after'][1] / 1024:>6.1f} | "
            f"recv KiB: {received['before'] / 1024:>7.1f} {received['after'] / 1024:>5.1f}",
            flush=True,
        )
    if args.simulate:
        print("# rank-local control work per row at larger worlds, measured in one process (no network):")
        print(
            f"{'ranks':>5} | {'before ms':>9} {'after ms':>8} {'ratio':>7} | held MiB: {'before':>7} {'after':>7} | peak MiB: {'before':>7} {'after':>7}"
        )
    for world in args.simulate:
        work = local_work(world, args.iters)
        (tb, hb, pb), (ta, ha, pa) = work["before"], work["after"]
        mib = 2.0**20
        print(
            f"{world:>5} | {tb * 1e3:>9.1f} {ta * 1e3:>8.2f} {tb / ta:>7.0f} | held MiB: {hb / mib:>7.1f} {ha / mib:>7.3f} | "
            f"peak MiB: {pb / mib:>7.1f} {pa / mib:>7.3f}",
            flush=True,
        )
    if len(worlds) < 2:
        return
    print("# PROJECTION (least squares a + b x ranks over the ranks above, extrapolated; not measured):")
    units = {"wall": "ms", "cpu": "ms", "held": "KiB"}
    for kind, by_way in series.items():
        for way, values in by_way.items():
            a, b = fit([float(w) for w in worlds], values)
            unit = units[kind]
            print(
                f"#   {kind:<4} {way:<12} {a:9.2f} {unit} + {b:8.3f} {unit} x ranks -> "
                f"1,024 ranks: {a + b * 1024:11.1f} {unit}, 8,192 ranks: {a + b * 8192:11.1f} {unit}"
            )


if __name__ == "__main__":
    main()
