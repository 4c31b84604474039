"""How much memory and time does reading a real job's profiler trace take? A generated Kineto trace
of --size MB (default 500), plain and gzipped, read by the replay's loader in a fresh process each.

The trace looks like a real one: per profiler step thousands of CPU ops (aten::*, with Input Dims),
their CUDA runtime calls, GPU kernels, flow events linking them, and a few collectives
(record_param_comms with their NCCL kernels): most of the file is events the reader drops. Reported
per file: the wall seconds, the reader's peak RSS (ru_maxrss of the child) beside the peak of a
child that only imports the loader, and the difference as a ratio to the file's size: what the
streaming reader holds beyond Python itself.

    python bench/trace_reader.py [--size 500] [--folder /tmp/traces] [--keep]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
READ = (
    "import resource, sys, time; from commbench.benchkit import load; t = time.perf_counter(); "
    "traces = load([sys.argv[1]]); s = time.perf_counter() - t; "
    "print(s, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, len(traces[0].collectives))"
)
IMPORT_ONLY = "import resource; from commbench.benchkit import load; print(0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, 0)"
BUCKETS = (2_049_000, 7_875_584, 6_563_840, 6_637_568, 2_431_040)
OPS = ("aten::mm", "aten::add_", "aten::relu", "aten::conv2d", "aten::batch_norm", "aten::copy_", "aten::view")


def _step_events(step: int, ts: float, ext: int, ops_per_step: int) -> tuple[list[str], float, int]:
    """One profiler step's events as JSON lines, most of them compute; a few collectives."""
    out = [
        json.dumps(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{step}",
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": 1e5,
                "args": {"External id": ext},
            }
        )
    ]
    for i in range(ops_per_step):
        ext += 1
        t = ts + i * 10
        name = OPS[i % len(OPS)]
        out.append(
            json.dumps(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": name,
                    "pid": 1,
                    "tid": 1,
                    "ts": t,
                    "dur": 4.2,
                    "args": {
                        "External id": ext,
                        "Record function id": ext,
                        "Ev Idx": ext,
                        "Input Dims": [[64, 1024], [1024, 1024]],
                        "Input type": ["float", "float"],
                        "Input Strides": [[1024, 1], [1024, 1]],
                        "Concrete Inputs": ["", ""],
                    },
                }
            )
        )
        out.append(
            json.dumps(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 1,
                    "tid": 1,
                    "ts": t + 1,
                    "dur": 2.1,
                    "args": {"External id": ext, "cbid": 211, "correlation": ext},
                }
            )
        )
        out.append(
            json.dumps(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": "volta_sgemm_128x64_nn",
                    "pid": 0,
                    "tid": 7,
                    "ts": t + 3,
                    "dur": 8.5,
                    "args": {
                        "External id": ext,
                        "queued": 0,
                        "device": 0,
                        "context": 1,
                        "stream": 7,
                        "correlation": ext,
                        "registers per thread": 128,
                        "shared memory": 0,
                        "grid": [8, 1, 1],
                        "block": [256, 1, 1],
                    },
                }
            )
        )
        out.append(json.dumps({"ph": "s", "id": ext, "pid": 1, "tid": 1, "ts": t + 1, "cat": "ac2g", "name": "ac2g"}))
        out.append(
            json.dumps(
                {"ph": "f", "id": ext, "pid": 0, "tid": 7, "ts": t + 3, "cat": "ac2g", "name": "ac2g", "bp": "e"}
            )
        )
    for k, n in enumerate(BUCKETS):
        ext += 1
        t = ts + ops_per_step * 10 + k * 100
        args = {
            "External id": ext,
            "Collective name": "allreduce",
            "In msg nelems": n,
            "Out msg nelems": n,
            "Group size": 2,
            "dtype": "Float",
            "In split size": "[]",
            "Out split size": "[]",
            "Process Group Name": "0",
            "Process Group Description": "default_pg",
            "Process Group Ranks": "[0, 1]",
        }
        out.append(
            json.dumps(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": "record_param_comms",
                    "pid": 1,
                    "tid": 2,
                    "ts": t,
                    "dur": 150.0,
                    "args": args,
                }
            )
        )
        out.append(
            json.dumps(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": "ncclKernel_AllReduce_RING_LL_Sum_float",
                    "pid": 0,
                    "tid": 40,
                    "ts": t + 20,
                    "dur": 2500.0,
                    "args": {**args, "correlation": ext},
                }
            )
        )
    return out, ts + ops_per_step * 10 + 1000, ext


def generate(path: Path, size_mb: int) -> int:
    """A Kineto trace of about size_mb MB at path; returns the collectives it holds."""
    target, written, step, ts, ext, collectives = size_mb * 2**20, 0, 0, 1e6, 1, 0
    info = {
        "backend": "nccl",
        "rank": 0,
        "world_size": 2,
        "pg_count": 1,
        "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 2, "ranks": [0, 1]}],
        "nccl_version": "2.17.1",
    }
    with path.open("w") as f:
        f.write('{"schemaVersion": 1, "distributedInfo": ' + json.dumps(info) + ', "traceEvents": [\n')
        first = True
        while written < target:
            lines, ts, ext = _step_events(step, ts, ext, ops_per_step=2000)
            chunk = (",\n" if not first else "") + ",\n".join(lines)
            f.write(chunk)
            written += len(chunk)
            first, step, collectives = False, step + 1, collectives + len(BUCKETS)
        f.write('\n], "displayTimeUnit": "ms"}\n')
    return collectives


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def measure(code: str, path: Path) -> tuple[float, int, int]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)], env=env, check=True, capture_output=True, text=True
    ).stdout
    seconds, rss_kb, found = out.split()
    return float(seconds), int(rss_kb) * 1024, int(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=500, help="MB of the generated trace (default 500)")
    parser.add_argument("--folder", type=Path, help="where to write the traces (default a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the generated traces")
    args = parser.parse_args()
    folder = args.folder or Path(tempfile.mkdtemp(prefix="commbench-traces-"))
    folder.mkdir(parents=True, exist_ok=True)
    plain, packed = folder / "rank0.trace.json", folder / "rank0.trace.json.gz"
    try:
        start = time.perf_counter()
        collectives = generate(plain, args.size)
        with plain.open("rb") as src, gzip.open(packed, "wb", compresslevel=1) as dst:
            shutil.copyfileobj(src, dst, 2**20)
        print(
            f"generated {plain.stat().st_size / 2**20:.0f} MB ({packed.stat().st_size / 2**20:.0f} MB gzipped), "
            f"{collectives} collectives, in {time.perf_counter() - start:.0f} s; load {_load()}"
        )
        _, base_rss, _ = measure(IMPORT_ONLY, plain)
        print(f"python + the loader alone: peak RSS {base_rss / 2**20:.1f} MB")
        for path in (plain, packed):
            seconds, rss, found = measure(READ, path)
            assert found == collectives, (found, collectives)
            size = plain.stat().st_size
            print(
                f"{path.name}: read in {seconds:.1f} s ({size / 2**20 / seconds:.0f} MB/s of JSON), peak RSS {rss / 2**20:.1f} MB, "
                f"{(rss - base_rss) / 2**20:.1f} MB above the import alone = {(rss - base_rss) / size:.4f} x the trace's "
                f"{size / 2**20:.0f} MB ({rss / size:.3f} x counting Python itself)"
            )
        print(f"load after: {_load()}")
    finally:
        if not args.keep and args.folder is None:
            shutil.rmtree(folder)
        elif not args.keep:
            for p in (plain, packed):
                p.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
