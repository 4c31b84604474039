"""Peak memory per op and variant, against the op's buffers and the memory guard's estimate.

Every case runs in fresh rank processes (2 Gloo ranks by default; on a GPU one set of ranks runs
every case, see case_results). A rank joins the group, runs the same case at a negligible size (so
code paths, the process group's buffers and first-use allocations are in place), resets its peak-memory mark (commbench.run.resources.reset_peak), then
sets the case up at the bench size and measures it as a sweep does: warm-up, timed iterations and
the check, for every phase. Per case, on the rank with the highest peak:

  runtime+  what the rank grew by between the memory guard's check (just after init) and the end of
            the negligible run: the runtime's first-use buffers (the guard adds RUNTIME_GROWTH_BYTES
            for them), and what the op holds whatever the size (a bucket of the cap's size)
  peak      peak resident memory above the runtime (VmHWM at the end - VmRSS at the reset)
  buffers   the tensors the op holds: inputs, outputs, any reference it keeps, bucket buffers
  calls     what one iteration allocates beyond them (the transport's copies, an op's packing):
            the peak of one more untimed iteration above the buffers
  estimate  Op.memory_bytes, which the memory guard checks before anything is allocated

and the ratios peak/buffers, peak/(buffers + calls) (what fill and check add: target <= 1.15) and
estimate/peak (target within 15%). Workloads follow --size: S for the sized ops; for the others,
tensors that make about S (grouped_all_gather: 1,K,K gathered; the bucketed ops: a 4-layer
transformer's gradients; sync_bn: its per-rank input is S/8).

    python bench/memory.py [--size 256M] [--ranks 2] [--ops all_gather,...] [--dtype float32] [--same-ranks]
"""

from __future__ import annotations

import argparse
import gc
import math
import statistics
import sys
from collections.abc import Iterator
from typing import Any

import torch
from ranks import RanksFailed, join_group, stream_ranks


def measurable_ops() -> list[str]:
    """Every registered op with buffers: the latency-only ones (barrier, no bus factor) hold none."""
    from commbench.benchkit import registry

    return [name for name, cls in registry().items() if cls.spec.bus_factor is not None]


def workload(op: str, size: int, world: int, element_size: int) -> tuple[dict[str, str], int]:
    """(op options, requested size) that make about `size` bytes of work for this op."""
    from commbench.benchkit import transformer_gradients

    elements = max(1, size // element_size)
    if op == "grouped_all_gather":
        k = max(1, elements // (2 * world))
        return {"tensors": f"1,{k},{k}"}, size
    if op in ("bucketed_reduce_scatter", "bucketed_all_reduce"):
        # 4 layers of 12 w^2 and an 8191 x w embedding: 48 w^2 + 8191 w = elements
        width = max(1, int((-8191 + math.sqrt(8191**2 + 4 * 48 * elements)) / (2 * 48)))
        return {"tensors": ",".join(map(str, transformer_gradients(layers=4, width=width)))}, size
    if op == "sync_bn":
        channels = max(1, elements // 8 // (8 * 16 * 16))
        return {"channels": str(channels), "batch": "8", "spatial": "16"}, size
    return {}, size


def held_bytes(root: Any) -> int:
    """Bytes of the distinct tensor storages reachable from root (lists, dicts, objects, modules, .grad)."""
    seen_objects: set[int] = set()
    storages: dict[int, int] = {}

    def visit(obj: Any) -> None:
        if id(obj) in seen_objects or obj is None or isinstance(obj, (str, bytes, int, float, bool, torch.dtype)):
            return
        seen_objects.add(id(obj))
        if torch.is_tensor(obj):
            if obj.device.type != "meta":
                storage = obj.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
            if obj.is_leaf:
                visit(obj.grad)
        elif isinstance(obj, torch.nn.Module):
            for t in [*obj.parameters(), *obj.buffers()]:
                visit(t)
        elif isinstance(obj, dict):
            for v in obj.values():
                visit(v)
        elif isinstance(obj, (list, tuple, set)):
            for v in obj:
                visit(v)
        elif hasattr(obj, "__dict__") and not callable(obj):  # a dataclass, a bucketer (not the backend's calls)
            for v in vars(obj).values():
                visit(v)

    visit(root)
    return sum(storages.values())


def rank_main(rank: int, world: int, port: int, queue: Any, cases: list[dict[str, Any]]) -> None:
    """Join the group once and measure each case in turn; rank 0 puts every rank's figures per case."""
    backend = join_group(rank, world, port, cases[0]["backend"])
    for case in cases:
        everyone = backend.all_gather_object(measure_case(backend, case))
        if rank == 0:
            queue.put(everyone)
        if backend.device.type == "cuda":
            torch.cuda.empty_cache()  # the next case's peak starts from what is allocated, not cached
    backend.close()


def measure_case(backend: Any, case: dict[str, Any]) -> dict[str, Any]:
    """This rank's figures for one case (see the module's docstring)."""
    from commbench.benchkit import (
        CollArgs,
        MemoryCase,
        Watchdog,
        complete,
        copies_of,
        load_op,
        measure,
        peak_bytes,
        reset_peak,
    )

    device = backend.device
    rss_at_check = reset_peak(device)  # where the memory guard reads what is available
    dtype = getattr(torch, case["dtype"])
    element_size = torch.empty((), dtype=dtype).element_size()
    watchdog = Watchdog(900, backend.rank)
    variant = case["variant"]

    def run(size: int) -> tuple[Any, Any, Any, int, int]:
        options, requested = workload(case["op"], size, backend.world_size, element_size)
        op = load_op(case["op"])(options)
        point = op.points([requested])[-1]
        window = op.spec.window_for(variant, case["window"])
        args = CollArgs(backend=backend, dtype=dtype, variant=variant)
        op.setup(args, point)
        wrong = 0
        for phase in op.phases:
            m = measure(op, args, phase, iters=2, warmup=1, window=window, check=True, watchdog=watchdog, label="")
            wrong += m.wrong
        return op, point, args, window, wrong

    run(8)
    gc.collect()
    growth = peak_bytes(device) - rss_at_check
    base = reset_peak(device)
    op, point, args, window, wrong = run(case["size"])
    peak = peak_bytes(device) - base
    buffers = held_bytes([args.input, args.output, args.expected, args.state])
    calls = 0
    for phase in op.phases:
        start = reset_peak(device)
        op.fill(args)
        op.before(args, phase)
        for _ in range(window):
            op.issue(args, phase)
        complete(args)
        calls = max(calls, peak_bytes(device) - start)
    on_host = device.type != "cuda"
    memory_case = MemoryCase(
        backend.world_size, variant, element_size, window, copies_of(case["backend"]), on_host=on_host
    )
    estimate = op.memory_bytes(memory_case, point)
    del op, args
    gc.collect()
    return {"peak": peak, "buffers": buffers, "calls": calls, "estimate": estimate, "wrong": wrong, "growth": growth}


def case_results(all_cases: list[dict[str, Any]], ranks: int, same_ranks: bool) -> Iterator[dict[str, Any]]:
    """Each case's figures on the rank with the highest peak (wrong: summed over ranks), as each ends.

    On the host every case runs in fresh rank processes: the C allocator's heaps and the kernel's
    high-water mark would carry one case's memory into the next. On a GPU one set of ranks measures
    every case: torch's allocator counts exactly what is allocated since its peak was reset, and
    CUDA and NCCL start once instead of once per case (34 of them, 3-6 s each). same_ranks chooses.
    """
    batches = [all_cases] if same_ranks else [[case] for case in all_cases]
    for batch in batches:
        for results in stream_ranks(rank_main, ranks, batch, items=len(batch)):
            worst = max(results, key=lambda r: r["peak"])
            yield {**worst, "wrong": sum(r["wrong"] for r in results), "growth": max(r["growth"] for r in results)}


def cases(ops: list[str], size: int, dtype: str, window: int, backend_name: str, ranks: int) -> list[dict[str, Any]]:
    """Every variant of the ops that runs on the backend (Gloo on CPU, or NCCL on CUDA)."""
    from commbench.benchkit import load_backend, load_op

    backend = load_backend(backend_name)()
    backend.world_size = ranks
    if backend_name == "nccl":
        backend.device = torch.device("cuda", 0)
    out = []
    for name in ops:
        op = load_op(name)()
        for variant in op.variants:
            if op.unavailable(variant, backend) is None and op.dtype_unavailable(getattr(torch, dtype)) is None:
                case = {"op": name, "variant": variant, "size": size, "dtype": dtype, "window": window}
                out.append({**case, "backend": backend_name})
    return out


def main() -> None:
    from commbench.benchkit import format_size, parse_size

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="256M")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--ops", default=",".join(measurable_ops()), help="default: every op that moves data")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--window", type=int, default=1, help="ops in flight per sample (non-blocking mode's window)")
    parser.add_argument("--backend", default="gloo", help="gloo (host memory) or nccl (GPU memory, one GPU per rank)")
    parser.add_argument(
        "--same-ranks",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="measure every case in one set of ranks (default: on a GPU only; on the host, fresh ranks per case)",
    )
    opts = parser.parse_args()
    size = parse_size(opts.size)
    mib = 2**20
    print(
        f"# peak memory above the runtime, {opts.ranks} {opts.backend} ranks, {opts.dtype}, workload about {format_size(size)}, window {opts.window}"
    )
    print(
        f"{'op/variant':<44}{'runtime+':>9}{'buffers':>9}{'calls':>9}{'peak':>9}{'estimate':>9}"
        f"{'peak/buffers':>14}{'peak/(buf+calls)':>18}{'estimate/peak':>15}"
    )
    growths = []
    ratios = []
    planned = cases(opts.ops.split(","), size, opts.dtype, opts.window, opts.backend, opts.ranks)
    wrong = 0
    try:
        for case, r in zip(
            planned,
            case_results(
                planned, opts.ranks, opts.same_ranks if opts.same_ranks is not None else opts.backend == "nccl"
            ),
        ):
            growths.append(r["growth"])
            own = r["peak"] / (r["buffers"] + r["calls"])
            ratios.append((own, r["estimate"] / r["peak"]))
            wrong += r["wrong"]
            print(
                f"{case['op'] + '/' + case['variant']:<44}{r['growth'] / mib:>8.0f}M{r['buffers'] / mib:>8.0f}M"
                f"{r['calls'] / mib:>8.0f}M{r['peak'] / mib:>8.0f}M{r['estimate'] / mib:>8.0f}M"
                f"{r['peak'] / r['buffers']:>14.2f}{own:>18.2f}{r['estimate'] / r['peak']:>15.2f}"
                + ("" if r["wrong"] == 0 else f"  WRONG {r['wrong']}"),
                flush=True,
            )
    except RanksFailed as exc:
        sys.exit(f"bench/memory.py: {exc}")
    print(
        f"# worst peak/(buffers+calls) {max(o for o, _ in ratios):.2f} (target <= 1.15); estimate/peak from "
        f"{min(e for _, e in ratios):.2f} to {max(e for _, e in ratios):.2f} (target 0.85 to 1.15); "
        f"runtime growth after the guard's check: median {statistics.median(growths) / mib:.0f}M"
    )
    if wrong:
        sys.exit(f"bench/memory.py: {wrong} wrong elements: a case's result was wrong")


if __name__ == "__main__":
    main()
