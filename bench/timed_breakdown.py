"""Where the microseconds of a timed sample go: each step of the harness's timed region, timed alone.

Part 1 runs on 2 Gloo ranks (all_gather flat, 8 B and 256 KB) and times, with perf_counter_ns
around each, the steps of the timed region as the harness took them before it bound its calls
(op.before, device synchronise, barrier, calls.clear, timer.start, op.issue, wait_all, timer.stop),
the same steps on the prepared path (the harness's own, if this checkout has it), and a bare loop
(clock, torch call, wait, clock). Each step's median over many iterations is printed in us.

Part 2 runs in one process with no collective: the torch function is a stub that returns a
finished wait object, so what is left is commbench's own Python on the path from the op to torch
(the op's issue, CollArgs.issue, the backend method and Backend.record, timer start/stop,
wait_all), each layer timed over 200,000 calls. Part 3 does the same for Horovod: a stub horovod
module (a handle is the input), the bare loop's async + synchronize + copy against the bound call
the harness times and the unbound path.

    python bench/timed_breakdown.py [--iters 2000]
"""

from __future__ import annotations

import argparse
import functools
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

from ranks import join_group, run_ranks

SIZES = [8, 256 << 10]


def _steps(iters: int, loops: dict[str, list[tuple[str, Callable[[], Any]]]]) -> dict[str, dict[str, float]]:
    """Per loop, the median us of each step over `iters` iterations, each step timed alone; the
    loops take turns iteration by iteration, so a slow spell of the machine touches them alike."""
    clock = time.perf_counter_ns
    taken = {kind: {name: [] for name, _ in steps} for kind, steps in loops.items()}
    for _ in range(iters):
        for kind, steps in loops.items():
            for name, step in steps:
                t0 = clock()
                step()
                taken[kind][name].append(clock() - t0)
    return {kind: {name: statistics.median(ns) / 1e3 for name, ns in steps.items()} for kind, steps in taken.items()}


def breakdown(backend: Any, size: int, iters: int) -> dict[str, dict[str, float]]:
    """The steps of each loop at one size, the loops taking turns."""
    import torch
    import torch.distributed as dist

    from commbench.benchkit import AllGather, CollArgs, Point, timer_for, wait_all

    op = AllGather()
    args = CollArgs(backend=backend, dtype=torch.float32, variant="flat")
    op.setup(args, Point.of_size(size))
    op.fill(args)
    timer = timer_for(backend)
    loops = {
        "op.issue path": [
            ("op.before", lambda: op.before(args, "comm")),
            ("synchronize", backend.synchronize),
            ("barrier", backend.barrier),
            ("calls.clear", backend.calls.clear),
            ("timer.start", timer.start),
            ("op.issue", lambda: op.issue(args, "comm")),
            ("wait_all", lambda: wait_all(args)),
            ("timer.stop", timer.stop),
        ]
    }
    if hasattr(op, "prepare"):  # the prepared path: start, bound call, wait, stop
        with backend.binding():
            call = op.prepare(args, "comm")
        waits = args.wait_objs

        def wait_all() -> None:
            for work in waits:
                work.wait()
            waits.clear()

        loops["prepared call"] = [
            ("barrier", backend.barrier),
            ("clock", time.perf_counter),
            ("prepared call", call),
            ("wait", wait_all),
            ("clock ", time.perf_counter),
        ]
    fn = getattr(dist, backend.flat_all_gather)
    held: list[Any] = []
    loops["bare loop"] = [
        ("barrier", dist.barrier),
        ("clock", time.perf_counter),
        ("torch call", lambda: held.append(fn(args.output, args.input, async_op=True))),
        ("wait", lambda: held.pop().wait()),
        ("clock ", time.perf_counter),
    ]
    found = _steps(iters, loops)
    timer.read_us()
    return found


def rank_main(rank: int, world: int, port: int, queue: Any, iters: int) -> None:
    backend = join_group(rank, world, port)
    found = {size: breakdown(backend, size, iters) for size in SIZES}
    if rank == 0:
        queue.put(found)
    backend.close()


def _per_call(fn: Callable[[], Any], calls: int, rounds: int = 10) -> float:
    """ns per call of fn: the fastest of `rounds` rounds of calls / rounds calls each (another job's
    spell on a shared machine slows some rounds, never speeds one)."""
    each = max(1, calls // rounds)
    best = math.inf
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        for _ in range(each):
            fn()
        best = min(best, (time.perf_counter_ns() - t0) / each)
    return best


class _Done:
    def wait(self) -> None:
        pass


def layers(calls: int) -> dict[str, float]:
    """ns per call of each layer between the op and torch, the torch function a stub."""
    import torch

    from commbench.benchkit import AllGather, CollArgs, GlooBackend, Point, timer_for, wait_all

    done = _Done()
    backend = GlooBackend()
    backend._all_gather_fn = lambda *a, **k: done  # the stub: no collective, no torch
    args = CollArgs(backend=backend, dtype=torch.float32, variant="flat")
    backend.world_size = 1
    op = AllGather()
    op.setup(args, Point.of_size(8))
    timer = timer_for(backend)

    per_call = functools.partial(_per_call, calls=calls)

    def issue_and_wait() -> None:
        op.issue(args, "comm")
        wait_all(args)

    def start_stop() -> None:
        timer.start()
        timer.stop()

    found = {
        "empty lambda (the loop's own cost)": per_call(lambda: None),
        "Backend.record": per_call(lambda: backend.record("x")),
        "CollArgs.issue (append)": per_call(lambda: (args.issue(done), args.wait_objs.clear())),
        "backend.all_gather_flat (record + stub)": per_call(lambda: backend.all_gather_flat(args.output, args.input)),
        "op.issue + wait_all (the whole chain)": per_call(issue_and_wait),
        "stub torch function alone": per_call(lambda: backend._all_gather_fn(args.output, args.input, async_op=True)),
        "timer.start + timer.stop": per_call(start_stop),
        "time.perf_counter x2": per_call(lambda: (time.perf_counter(), time.perf_counter())),
    }
    timer.read_us()
    if hasattr(op, "prepare"):
        with backend.binding():
            call = op.prepare(args, "comm")

        def prepared() -> None:
            call()
            for work in args.wait_objs:
                work.wait()
            args.wait_objs.clear()

        found["prepared call + wait (the whole chain)"] = per_call(prepared)
    return found


class _StubHorovod:
    """horovod.torch's async API with no communication: a handle is the input, synchronize returns it."""

    def allgather_async(self, tensor: Any, name: str) -> Any:
        return tensor

    def synchronize(self, handle: Any) -> Any:
        return handle


def horovod_layers(calls: int) -> dict[str, float]:
    """ns per call of commbench's Python around a Horovod allgather, Horovod a stub: what a bare loop
    does (async, synchronize, copy), the bound call the harness times, and the unbound path."""
    import torch

    from commbench.benchkit import HorovodBackend

    backend = HorovodBackend()
    backend.hvd = hvd = _StubHorovod()
    out, inp = torch.zeros(2), torch.ones(2)

    per_call = functools.partial(_per_call, calls=calls)

    def bare() -> None:
        out.copy_(hvd.synchronize(hvd.allgather_async(inp, name="commbench.allgather.0")))

    with backend.binding():
        bound = backend.bind(backend.all_gather_flat, out, inp)
    return {
        "empty lambda (the loop's own cost)": per_call(lambda: None),
        "bare: allgather_async + synchronize + copy_": per_call(bare),
        "bound call + wait (the harness's timed path)": per_call(lambda: bound().wait()),
        "unbound all_gather_flat + wait (names, record)": per_call(lambda: backend.all_gather_flat(out, inp).wait()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=200_000)
    opts = parser.parse_args()
    found = run_ranks(rank_main, 2, opts.iters)
    print(f"# part 1: all_gather flat on 2 Gloo ranks, median us per step over {opts.iters} iterations")
    for size, rows in found.items():
        for kind, steps in rows.items():
            timed = [v for k, v in steps.items() if k not in ("op.before", "synchronize", "barrier", "calls.clear")]
            print(f"{size:>8} B  {kind:<24} timed-region sum {sum(timed):8.2f}")
            print("            " + "  ".join(f"{k} {v:.2f}" for k, v in steps.items()))
    print(f"# part 2: one process, the torch call a stub; ns per call over {opts.calls} calls")
    for name, ns in layers(opts.calls).items():
        print(f"  {name:<44} {ns:8.0f} ns")
    print(f"# part 3: one process, Horovod a stub (2-element tensors); ns per call over {opts.calls} calls")
    for name, ns in horovod_layers(opts.calls).items():
        print(f"  {name:<48} {ns:8.0f} ns")


if __name__ == "__main__":
    main()
