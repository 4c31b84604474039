"""Does a trace's content change what reading it costs? A valid Kineto trace (bench/trace_reader.py's
generator) and adversarial traces of the same inflated size (a long string, whitespace, a damaged
event, deep-ish nesting, a gzip bomb within the budget, tiny events), all gzipped, each read by the
replay's loader in a fresh process: its wall time and peak RSS, and their ratios to the valid
trace's. The target (issue 44): at most 2x the valid trace's time, the same peak memory.

    python bench/trace_adversarial.py [--size 100]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from bench.trace_reader import REPO, generate

# The child's peak is the kernel's high-water mark, reset once the loader is imported (a forked
# child's ru_maxrss starts at its parent's, which generated the traces): what reading added to it.
READ = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "from commbench.benchkit import load\n"
    "def status(key):\n"
    "    line = next(x for x in Path('/proc/self/status').read_text().splitlines() if x.startswith(key))\n"
    "    return int(line.split()[1]) * 1024\n"
    "Path('/proc/self/clear_refs').write_text('5')\n"
    "before = status('VmRSS')\n"
    "t = time.perf_counter()\n"
    "try:\n"
    "    said = f'{len(load([sys.argv[1]])[0].collectives)} collectives'\n"
    "except Exception as exc:\n"
    "    said = 'refused: ' + str(exc).split(': ', 1)[-1][:60]\n"
    "s = time.perf_counter() - t\n"
    "print(s, status('VmHWM'), status('VmHWM') - before, said)\n"
)
INFO = {"backend": "nccl", "rank": 0, "world_size": 2, "pg_config": [{"pg_name": "0", "ranks": [0, 1]}]}
COLLECTIVE = {
    "ph": "X",
    "cat": "cpu_op",
    "name": "record_param_comms",
    "pid": 1,
    "tid": 2,
    "ts": 50,
    "dur": 150.0,
    "args": {"Collective name": "allreduce", "In msg nelems": 2_049_000, "Out msg nelems": 2_049_000, "dtype": "Float"},
}
COMPUTE = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 4.2, "args": {}}


def _trace(body: Iterable[bytes]) -> Iterator[bytes]:
    """A Kineto trace's text around body (event texts, each ending with a comma), one collective last."""
    yield b'{"schemaVersion": 1, "distributedInfo": ' + json.dumps(INFO).encode() + b', "traceEvents": [\n'
    yield from body
    yield json.dumps(COLLECTIVE).encode() + b"\n]}\n"


def _repeated(unit: bytes, size: int) -> Iterator[bytes]:
    """unit repeated to about size bytes, yielded a few MB at a time."""
    block = unit * max(1, (4 << 20) // len(unit))
    for _ in range(max(1, size // len(block))):
        yield block


def _long_strings(size: int) -> Iterator[bytes]:
    event = dict(COMPUTE, name="x" * (4 << 20))  # 4 MB a string, half the cap of one event
    return _repeated((json.dumps(event) + ",\n").encode(), size)


def _whitespace(size: int) -> Iterator[bytes]:
    return _repeated(b" \n\t\r" * (1 << 18), size)


def _nested(size: int) -> Iterator[bytes]:
    event = dict(COMPUTE, args={"x": json.loads("[" * 500 + "]" * 500)})  # under Python's parser's depth
    return _repeated((json.dumps(event) + ",\n").encode(), size)


def _bomb(size: int) -> Iterator[bytes]:
    return _repeated((json.dumps(COMPUTE) + ",\n").encode(), size)


def _tiny(size: int) -> Iterator[bytes]:
    return _repeated(b"0,", size)


def _damaged(valid: Path) -> Iterator[bytes]:
    """The valid trace with one event's comma dropped halfway through: refused there."""
    with gzip.open(valid, "rb") as f:
        text = f.read()
    middle = text.index(b'"cat": "cpu_op",', len(text) // 2)
    yield text[:middle] + text[middle:].replace(b'"cat": "cpu_op",', b'"cat": "cpu_op"', 1)


SHAPES: dict[str, Callable[[int], Iterator[bytes]]] = {
    "long strings (4 MB each)": _long_strings,
    "whitespace": _whitespace,
    "deep-ish nesting (500 levels)": _nested,
    "gzip bomb within the budget": _bomb,
    "tiny events (0, 0, 0, ...)": _tiny,
}


def _write(path: Path, parts: Iterable[bytes]) -> int:
    """The parts gzipped into path; returns the inflated size."""
    size = 0
    with gzip.open(path, "wb", compresslevel=1) as f:
        for part in parts:
            f.write(part)
            size += len(part)
    return size


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def measure(path: Path) -> tuple[float, int, int, str]:
    """The read's wall seconds, the reading process's peak RSS and how much reading added to it, what it said."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", READ, str(path)], env=env, check=True, capture_output=True, text=True
    ).stdout
    seconds, peak, added, said = out.strip().split(" ", 3)
    return float(seconds), int(peak), int(added), said


def _files(folder: Path, size_mb: int) -> list[tuple[str, Path, int]]:
    """(shape, file, inflated bytes) for the valid trace and each adversarial one."""
    plain = folder / "valid.json"
    generate(plain, size_mb)
    valid = folder / "valid.json.gz"
    with plain.open("rb") as src:
        inflated = _write(valid, iter(lambda: src.read(1 << 20), b""))
    plain.unlink()
    out = [("valid trace", valid, inflated)]
    for i, (shape, body) in enumerate(SHAPES.items()):
        path = folder / f"shape{i}.json.gz"
        out.append((shape, path, _write(path, _trace(body(inflated)))))
    damaged = folder / "damaged.json.gz"
    out.append(("a damaged event halfway", damaged, _write(damaged, _damaged(valid))))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100, help="MB of each trace, inflated (default 100)")
    size_mb = parser.parse_args().size
    with tempfile.TemporaryDirectory(prefix="commbench-adversarial-") as folder:
        files = _files(Path(folder), size_mb)
        print(f"load average before: {_load()}")
        print(
            "| trace | inflated | on disk | read in | peak RSS (reading added) | time / valid | peak / valid | outcome |"
        )
        print("|---|---|---|---|---|---|---|---|")
        base: tuple[float, int] | None = None
        for shape, path, inflated in files:
            seconds, peak, added, said = measure(path)
            base = base or (seconds, peak)
            print(
                f"| {shape} | {inflated / 2**20:.0f} MB | {path.stat().st_size / 2**20:.2f} MB | {seconds:.2f} s | "
                f"{peak / 2**20:.1f} MB ({added / 2**20:+.1f}) | {seconds / base[0]:.2f} | {peak / base[1]:.2f} | {said} |"
            )
        print(f"load average after: {_load()}")


if __name__ == "__main__":
    main()
