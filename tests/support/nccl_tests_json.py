"""nccl-tests' `-J` results files, built by the tests from the schema nccl-tests writes.

The layout follows JSON_FILE_VERSION 3 of nccl-tests' src/util.cu (version 1, with its footer's
misspelt keys, when asked) (jsonOutputInit,
writeDeviceReport, writeBenchmarkLine*, writePerIterReport, writeResultFooter): `version`,
`start_time`, `args`, `env`, `nccl_version`, `config` (with `devices[]`), `results[]` (each with
`size`, `count`, `type`, `redop`, `root`, `out_of_place`, `in_place` and, with per-iteration
timing, `out_of_place_per_iter` / `in_place_per_iter`), `out_of_bounds`,
`average_bus_bandwidth`, `errors`, `end_time`. No nccl-tests output was copied: the values are
made up here, from a latency + bandwidth model.
"""

from __future__ import annotations

import datetime
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

SIZES = (8, 1024, 65536, 1 << 20)
# The bus factor nccl-tests and commbench share for an all_gather of n ranks: (n - 1) / n.
GATHER = {"all_gather_perf": lambda n: (n - 1) / n, "all_reduce_perf": lambda n: 2 * (n - 1) / n}


def nccl_tests_file(
    path: Path,
    program: str = "all_gather_perf",
    *,
    hosts: tuple[str, ...] = ("gpu-a", "gpu-b"),
    gpus_per_host: int = 2,
    factor: float = 1.0,
    per_iter: bool = True,
    seed: int = 1,
    iters: int = 20,
    env: tuple[str, ...] = ("NCCL_IB_HCA=mlx5_0", "NCCL_DEBUG=WARN", "HOME=/home/u", "AWS_SECRET_ACCESS_KEY=hush"),
    start: str = "2026-12-01 21:00:00",
    version: int = 3,
) -> Path:
    """Write one nccl-tests -J document: `program` over hosts x gpus_per_host ranks, times scaled by factor."""
    rng = random.Random(seed)
    n = len(hosts) * gpus_per_host
    devices = [
        {
            "rank": r,
            "group": 0,
            "pid": 1000 + r,
            "hostname": hosts[r // gpus_per_host],
            "device": r % gpus_per_host,
            "device_hex": f"0000:{r % gpus_per_host + 4:02x}:00",
            "device_info": "NVIDIA H100 80GB HBM3",
        }
        for r in range(n)
    ]
    results = [_result(size, n, program, factor, per_iter, rng, iters) for size in SIZES]
    document: dict[str, Any] = {
        "version": version,
        "start_time": start,
        "args": [f"./build/{program}", "-b", "8", "-e", "1M", "-f", "32", "-g", "1", "-J", str(path)],
        "env": list(env),
        "nccl_version": 22703,
        "config": {
            "nthreads": 1,
            "ngpus": 1,
            "minimum_bytes": SIZES[0],
            "maximum_bytes": SIZES[-1],
            "step_factor": 32,
            "warmup_iters": 5,
            "iterations": iters,
            "aggregated_iterations": 1,
            "validation": 1,
            "graph": 0,
            "blocking_collectives": "false",
            "per_iter_timing": "true" if per_iter else "false",
            "per_iter_skip": 0,
            "parallel_init": "false",
            "devices": devices,
        },
        "results": results,
        "out_of_bounds": {"count": 0, "okay": "true"},
        # Version 1 (nccl-tests v2.17.3 to v2.19.1) spells these two keys so; later versions do not.
        **(
            {"average_bus_bandwidith": {"bandwidith": 1.0, "okay": "unchecked"}}
            if version == 1
            else {"average_bus_bandwidth": {"bandwidth": 1.0, "okay": "unchecked"}}
        ),
        "errors": [],
        "end_time": str(datetime.datetime.fromisoformat(start) + datetime.timedelta(seconds=7)),
    }
    path.write_text(json.dumps(document))
    return path


def _result(size: int, n: int, program: str, factor: float, per_iter: bool, rng: random.Random, iters: int) -> dict:
    base = (20.0 + size / 20000.0) * factor  # 20 us latency, 20 GB/s
    redop = "sum" if program in ("all_reduce_perf", "reduce_perf", "reduce_scatter_perf") else "none"
    out: dict[str, Any] = {"size": size, "count": size // 4, "type": "float", "redop": redop, "root": "    -1"}
    for placement in ("out_of_place", "in_place"):
        times = [base * rng.lognormvariate(0.0, 0.03) for _ in range(iters)]
        mean = sum(times) / len(times)
        algbw = size / (mean * 1e-6) / 1e9
        out[placement] = {"time": mean, "alg_bw": algbw, "bus_bw": algbw * GATHER[program](n), "nwrong": 0}
        if per_iter:
            ordered = sorted(times)
            out[f"{placement}_per_iter"] = {
                "skipped_iterations": 0,
                "min_us": ordered[0],
                "max_us": ordered[-1],
                "avg_us": mean,
                "p50_us": ordered[len(ordered) // 2],
                "p95_us": ordered[int(0.95 * (len(ordered) - 1))],
                "p99_us": ordered[-1],
                "stdev_us": 0.0,
                "cv_pct": 0.0,
                "times_us": times,
            }
    out["actual_iterations"] = iters
    out["experiment_name"] = ""
    return out


def changed_file(path: Path, change: Callable[[dict[str, Any]], Any], **options: Any) -> Path:
    """nccl_tests_file(path, **options), then change(document) applied to it in place: a file
    nccl-tests could not have written, or a hostile colleague could."""
    document = json.loads(nccl_tests_file(path, **options).read_text())
    change(document)
    path.write_text(json.dumps(document))
    return path
