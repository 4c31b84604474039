"""all_to_all: MoE-like uneven splits against equal splits of the same S.

`single` (equal chunks) and `uneven` (splits drawn as docs/ops.md describes, --imbalance) run in
the same Gloo processes through commbench's harness, interleaved round by round (alternating which
goes first), at three sizes. Every rank sends the same S in both; with uneven splits the busiest
rank receives more than the mean, so the collective waits for it. Each round gives one ratio,
uneven p50 / single p50, from blocks measured back to back; the median over rounds is reported.

    python bench/all_to_all_uneven.py [--ranks 2] [--imbalance 0.5] [--rounds 10] [--iters 20]
"""

from __future__ import annotations

import statistics

import torch
from ranks import arguments, join_group, run_ranks

SIZES = [64 << 10, 1 << 20, 16 << 20]
VARIANTS = ("single", "uneven")


def rank_main(rank: int, world: int, port: int, queue, imbalance: float, rounds: int, iters: int) -> None:
    from commbench.benchkit import AllToAll, CollArgs, Point, Watchdog, measure, receive_imbalance

    backend = join_group(rank, world, port)
    watchdog = Watchdog(300, rank)
    op = AllToAll({"imbalance": str(imbalance)})
    results = []
    for size in SIZES:
        cases = {v: CollArgs(backend=backend, dtype=torch.float32, variant=v) for v in VARIANTS}
        for args in cases.values():
            op.setup(args, Point.of_size(size))
        samples: dict[str, list[float]] = {v: [] for v in VARIANTS}
        ratios = []
        for r in range(rounds):
            for variant in VARIANTS if r % 2 == 0 else reversed(VARIANTS):
                m = measure(
                    op,
                    cases[variant],
                    "comm",
                    iters=iters,
                    warmup=2,
                    window=1,
                    check=True,
                    watchdog=watchdog,
                    label=variant,
                )
                assert m.wrong == 0
                samples[variant] += m.samples_us
            ratios.append(statistics.median(samples["uneven"][-iters:]) / statistics.median(samples["single"][-iters:]))
        skew = receive_imbalance(cases["uneven"].state.splits)
        s_bytes = op.size_bytes(cases["single"], "comm")
        assert s_bytes == op.size_bytes(cases["uneven"], "comm")  # the same S: the ratio compares like with like
        results.append((s_bytes, *(statistics.median(samples[v]) for v in VARIANTS), statistics.median(ratios), skew))
    if rank == 0:
        queue.put(results)
    backend.close()


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--imbalance", type=float, default=0.5)
    opts = parser.parse_args()
    results = run_ranks(rank_main, opts.ranks, opts.imbalance, opts.rounds, opts.iters)
    print(
        f"# all_to_all on {opts.ranks} Gloo ranks, --imbalance {opts.imbalance:g}, "
        f"{opts.rounds} interleaved rounds x {opts.iters} iters"
    )
    print(
        f"{'S (bytes)':>10} {'single p50 (us)':>16} {'uneven p50 (us)':>16} "
        f"{'uneven/single (median of rounds)':>33} {'max recv / mean':>16}"
    )
    for size, single, uneven, ratio, skew in results:
        print(f"{size:>10} {single:>16.1f} {uneven:>16.1f} {ratio:>33.3f} {skew:>16.2f}")


if __name__ == "__main__":
    main()
