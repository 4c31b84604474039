"""Result CSVs the tests build themselves: real COLUMNS, written by the real CsvAppender.

Times are drawn from a seeded log-normal around a simple latency + bandwidth model, so two runs
with different seeds come from the same distribution and a factor plants a known change. With
rounds, each round's samples are scaled by its own log-normal drift (round_sigma), as a shared
machine's load moves between rounds. version=1 writes the first schema (no interval, no rounds).
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commbench.results.paths import raw_path
from commbench.results.schema import COLUMNS, RAW_COLUMNS, RAW_COLUMNS_V1, SCHEMA_VERSION
from commbench.results.stats import HEADLINE_HI, HEADLINE_LO, HEADLINE_ROUNDS, Stats, bandwidth_gbps, percentile
from commbench.results.writer import CsvAppender

# What version 1 of the schema lacked (and files written before the mean became the headline).
HEADLINE_COLUMNS = (HEADLINE_LO, HEADLINE_HI, HEADLINE_ROUNDS)
V2_ONLY = ("rounds", "time_us_p50_lo", "time_us_p50_hi", "time_us_p50_rounds", *HEADLINE_COLUMNS)
COLUMNS_V1 = tuple(c for c in COLUMNS if c not in V2_ONLY)

SIZES = (8, 1024, 65536, 1 << 20)


@dataclass
class Case:
    """One (op, variant, phase) measured at every size; factor scales its times (2.0 = twice as slow)."""

    op: str
    variant: str
    phase: str = "comm"
    factor: float = 1.0
    sizes: tuple[int, ...] = SIZES
    status: str = "ok"
    factors_by_size: dict[int, float] = field(default_factory=dict)
    bytes_scale: float = 1.0  # S = size x this, count = size / 4: variants moving other bytes for one workload
    latency_only: bool = False  # a barrier: algbw and busbw empty (give sizes=(0,))
    # A second, slow mode at these sizes: SLOW_SHARE of the iterations this many times slower (as a
    # shared host's slow iterations): the mean moves with it, the p50 stays in the fast mode.
    slow_by_size: dict[int, float] = field(default_factory=dict)


SLOW_SHARE = 0.3


def _slowed(block: list[float], factor: float) -> list[float]:
    slow = math.ceil(SLOW_SHARE * len(block))
    return [t * factor if i < slow else t for i, t in enumerate(block)]


def base_time_us(size: int) -> float:
    return 100.0 + size / 2000.0  # 100 us latency, 2 GB/s


# The cases the chart, report and compare tests share (tests/conftest.py's run_csv): one family
# with a speedup over its baseline, one op with two variants, and an unavailable row.
CHART_CASES = [
    Case("all_gather", "flat"),
    Case("all_gather", "list", factor=1.3),
    Case("grouped_all_gather", "separate", factor=2.0),
    Case("grouped_all_gather", "coalesced", factor=1.0),  # twice as fast as its baseline
    Case("sync_bn", "horovod", status="unavailable"),
]


def synth_run(
    path: Path,
    cases: list[Case],
    *,
    seed: int,
    iters: int = 40,
    world_size: int = 2,
    backend: str = "gloo",
    dtype: str = "float32",
    raw: bool = True,
    sigma: float = 0.05,
    run_id: str | None = None,
    host: str = "testhost",
    group: str = "world",
    rounds: int = 1,
    round_sigma: float = 0.0,
    version: int = SCHEMA_VERSION,
) -> Path:
    """Write a results CSV (and its .raw.csv when raw) for the cases; returns the CSV path."""
    rng = random.Random(seed)
    run_id = run_id or f"run{seed}"
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = CsvAppender(path, COLUMNS if version >= 2 else COLUMNS_V1)
    raw_writer = CsvAppender(raw_path(path), RAW_COLUMNS if version >= 2 else RAW_COLUMNS_V1) if raw else None
    base: dict[str, Any] = {
        "schema_version": version,
        "run_id": run_id,
        "timestamp": "2026-01-01T00:00:00+00:00",
        "dtype": dtype,
        "mode": "blocking",
        "world_size": world_size,
        "group": group,
        "group_size": world_size if group == "world" else world_size // 2,
        "backend": backend,
        "iters": iters,
        "warmup": 2,
        "window": 1,
        "hosts": host,
        "node_ranks": f"0@{host}/0;1@{host}/0",
        "torch_version": "2.13.0+cpu",
        "backend_version": f"{backend} test",
        "commbench_version": "0.1.0",
        "command": f"commbench sweep --seed {seed}",
    }
    for case in cases:
        if case.status == "unavailable":
            writer.write(
                {**base, "op": case.op, "variant": case.variant, "status": "unavailable", "note": "needs horovod"}
            )
            continue
        for size in case.sizes:
            centre = base_time_us(size) * case.factor * case.factors_by_size.get(size, 1.0)
            per_round = [iters // rounds + (1 if r < iters % rounds else 0) for r in range(rounds)]
            by_round = []
            for n in per_round:
                drift = math.exp(rng.gauss(0.0, round_sigma))
                by_round.append([centre * drift * math.exp(rng.gauss(0.0, sigma)) for _ in range(n)])
            if size in case.slow_by_size:  # every round's first SLOW_SHARE of iterations
                by_round = [_slowed(block, case.slow_by_size[size]) for block in by_round]
            samples = [t for block in by_round for t in block]
            round_of = [r for r, block in enumerate(by_round) for _ in block]
            stats = Stats.from_samples(samples)
            key = {
                "op": case.op,
                "variant": case.variant,
                "phase": case.phase,
                "size_bytes": int(size * case.bytes_scale),
            }
            factor = None if case.latency_only else (world_size - 1) / world_size
            algbw, busbw = bandwidth_gbps(key["size_bytes"], stats.headline, factor)
            wrong = 3 if case.status == "wrong" else 0
            writer.write(
                {
                    **base,
                    **key,
                    "count": size // 4,
                    "api": case.op,
                    "calls": 1,
                    **stats.as_dict(),
                    "rounds": rounds,
                    "time_us_p50_rounds": ";".join(f"{percentile(sorted(b), 50):.6g}" for b in by_round),
                    HEADLINE_ROUNDS: ";".join(f"{statistics.fmean(b):.6g}" for b in by_round),
                    "algbw_gbps": algbw,
                    "busbw_gbps": busbw,
                    "wrong": wrong,
                    "status": case.status,
                    "note": "",
                }
            )
            if raw_writer:
                # Rank 0 is the slowest rank of every iteration, so the max over ranks is the sample.
                raw_writer.write_many(
                    {
                        "run_id": run_id,
                        **key,
                        "dtype": dtype,
                        "mode": "blocking",
                        "round": round_of[i],
                        "iteration": i,
                        "rank": r,
                        "time_us": t * (1.0 if r == 0 else 0.9),
                    }
                    for i, t in enumerate(samples)
                    for r in range(world_size)
                )
    writer.close()
    if raw_writer:
        raw_writer.close()
    return path
