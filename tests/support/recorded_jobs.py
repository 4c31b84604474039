"""Real training jobs on 2+ Gloo ranks, recorded by torch.profiler and ExecutionTraceObserver as a
user would record them, with what each job issued observed independently of the profilers.

- record(job, folder, world_size=2, steps=3) -> Recording: runs `job` (a name in JOBS) on every rank
  of a real Gloo group under `torch.profiler.profile(record_shapes=True, schedule=warmup 1, active
  steps)` with an `ExecutionTraceObserver` attached. It writes rank{r}.kineto.json (Chrome trace)
  and rank{r}.et.json (Execution Trace) into folder and returns, per rank and per profiled step, the
  collectives the job issued (Issued records, in order), as the job itself saw them: a DDP comm hook
  for the gradient buckets, wrappers around torch.distributed's functions for FSDP and all_to_all,
  the module's buffers for DDP's per-step broadcast.
- Recording.kineto(rank=None) / Recording.execution_traces(rank=None): the files written (all ranks,
  or one rank's).
- Recording.steady(rank=0): the sequence of the profiled steps after the first (the first holds the
  profiler's own start-up broadcasts as well), asserted equal across those steps.
- Issued.matches(call): whether a replay Call issues exactly this collective (op, variant, dtype,
  element counts, splits, group).

The jobs: "ddp" (Linear/BatchNorm model, 1 MB gradient buckets, buffers broadcast each step),
"fsdp" (FSDP2 fully_shard per layer: all_gather_into_tensor + reduce_scatter_tensor),
"all_to_all" (uneven all_to_all_single, splits differing per rank). Marked slow where used: they
start processes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.distributed import run_ranks

WARMUP = 1


@dataclass(frozen=True)
class Issued:
    """One collective as the job issued it (its own view, not a profiler's)."""

    op: str  # commbench's op name
    variant: str
    dtype: str
    in_elems: int
    out_elems: int
    group_ranks: tuple[int, ...]
    splits: tuple[tuple[int, ...], ...] = ()  # all_to_all: every rank's input splits, [src][dst]

    def matches(self, call: Any) -> bool:
        return (call.op, call.variant, call.dtype, call.in_elems, call.out_elems, call.group_ranks, call.splits) == (
            self.op,
            self.variant,
            self.dtype,
            self.in_elems,
            self.out_elems,
            self.group_ranks,
            self.splits,
        )


@dataclass
class Recording:
    folder: Path
    world_size: int
    issued: list[list[list[Issued]]] = field(default_factory=list)  # [rank][step][k]

    def kineto(self, rank: int | None = None) -> list[str]:
        return [str(self.folder / f"rank{r}.kineto.json") for r in self._ranks(rank)]

    def execution_traces(self, rank: int | None = None) -> list[str]:
        return [str(self.folder / f"rank{r}.et.json") for r in self._ranks(rank)]

    def _ranks(self, rank: int | None) -> range:
        return range(self.world_size) if rank is None else range(rank, rank + 1)

    def steady(self, rank: int = 0) -> list[Issued]:
        later = self.issued[rank][1:]
        assert later and all(s == later[0] for s in later), later
        return later[0]


def _dtype(t: Any) -> str:
    return str(t.dtype).removeprefix("torch.")


class _Tap:
    """Wrappers around torch.distributed's functions that log what the job calls, then call them."""

    def __init__(self, log: list[Issued], world: int) -> None:
        import torch.distributed as dist

        self.log, self.world, self.dist, self.saved = log, world, dist, {}
        ranks = tuple(range(world))

        def tap(name: str, issued: Callable[..., Issued]) -> None:
            original = getattr(dist, name)
            self.saved[name] = original

            @functools.wraps(original)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                log.append(issued(*args, **kwargs))
                return original(*args, **kwargs)

            setattr(dist, name, wrapper)

        def tensors(args: tuple, kwargs: dict[str, Any]) -> tuple[Any, Any]:
            out = args[0] if args else kwargs.get("output", kwargs.get("output_tensor"))
            inp = args[1] if len(args) > 1 else kwargs.get("input", kwargs.get("input_tensor"))
            return out, inp

        def gathered(*args: Any, **kwargs: Any) -> Issued:
            out, inp = tensors(args, kwargs)
            return Issued("all_gather", "flat", _dtype(inp), inp.numel(), out.numel(), ranks)

        def scattered(*args: Any, **kwargs: Any) -> Issued:
            out, inp = tensors(args, kwargs)
            return Issued("reduce_scatter_base", "flat", _dtype(inp), inp.numel(), out.numel(), ranks)

        # FSDP2 calls these two (torch 2.13's _fsdp_collectives); older torch the *_tensor forms
        for name in ("all_gather_single", "all_gather_into_tensor"):
            if hasattr(dist, name):
                tap(name, gathered)
        for name in ("reduce_scatter_single", "reduce_scatter_tensor"):
            if hasattr(dist, name):
                tap(name, scattered)

    def close(self) -> None:
        for name, original in self.saved.items():
            setattr(self.dist, name, original)


def _ddp(step_log: list[Issued], world: int) -> Callable[[], None]:
    import torch
    import torch.distributed as dist

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 512), torch.nn.BatchNorm1d(512), torch.nn.Linear(512, 512), torch.nn.Linear(512, 8)
    )
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1)
    ranks = tuple(range(world))

    def hook(_state, bucket):  # type: ignore[no-untyped-def]  # DDP refuses a hook whose annotations are strings
        buf = bucket.buffer()
        step_log.append(Issued("all_reduce", "flat", _dtype(buf), buf.numel(), buf.numel(), ranks))
        return dist.all_reduce(buf, async_op=True).get_future().then(lambda f: f.value()[0].div_(world))

    ddp.register_comm_hook(None, hook)
    # DDP broadcasts the module's buffers at each forward, coalesced into one flat tensor per dtype
    by_dtype: dict[str, int] = {}
    for b in model.buffers():
        by_dtype[_dtype(b)] = by_dtype.get(_dtype(b), 0) + b.numel()
    buffers = [Issued("broadcast", "flat", d, n, n, ranks) for d, n in by_dtype.items()]
    optim = torch.optim.SGD(ddp.parameters(), lr=0.01)

    def step() -> None:
        step_log.extend(buffers)
        ddp(torch.randn(8, 64)).sum().backward()
        optim.step()
        optim.zero_grad()

    return step


def _fsdp(step_log: list[Issued], world: int) -> Callable[[], None]:
    import torch
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16))
    for layer in (model[0], model[2]):
        fully_shard(layer)
    fully_shard(model)
    optim = torch.optim.SGD(model.parameters(), lr=0.01)

    def step() -> None:
        model(torch.randn(4, 32)).sum().backward()
        optim.step()
        optim.zero_grad()

    return step


def _all_to_all(step_log: list[Issued], world: int) -> Callable[[], None]:
    import torch
    import torch.distributed as dist

    rank = dist.get_rank()
    splits = tuple(tuple(1 + (src * world + dst) % 3 + src for dst in range(world)) for src in range(world))
    send, receive = splits[rank], [row[rank] for row in splits]

    def step() -> None:
        inp = torch.arange(sum(send), dtype=torch.float64)
        out = torch.empty(sum(receive), dtype=torch.float64)
        step_log.append(
            Issued("all_to_all", "uneven", "float64", inp.numel(), out.numel(), tuple(range(world)), splits)
        )
        dist.all_to_all_single(out, inp, receive, list(send))

    return step


JOBS: dict[str, Callable[[list[Issued], int], Callable[[], None]]] = {
    "ddp": _ddp,
    "fsdp": _fsdp,
    "all_to_all": _all_to_all,
}


def _record_rank(_backend: Any, job: str, folder: str, steps: int) -> list[list[Issued]]:
    import torch.distributed as dist
    from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, schedule

    rank, world = dist.get_rank(), dist.get_world_size()
    log: list[Issued] = []
    tap = _Tap(log, world)
    try:
        step = JOBS[job](log, world)
        et = ExecutionTraceObserver().register_callback(f"{folder}/rank{rank}.et.json")
        per_step: list[list[Issued]] = []
        with profile(
            activities=[ProfilerActivity.CPU],
            record_shapes=True,
            schedule=schedule(wait=0, warmup=WARMUP, active=steps, repeat=1),
            execution_trace_observer=et,
            on_trace_ready=lambda p: p.export_chrome_trace(f"{folder}/rank{rank}.kineto.json"),
        ) as prof:
            for _ in range(WARMUP + steps):
                log.clear()
                step()
                per_step.append(list(log))
                prof.step()
        return per_step[WARMUP:]
    finally:
        tap.close()


def record(job: str, folder: Path, world_size: int = 2, steps: int = 3) -> Recording:
    """Run and record `job` on world_size real Gloo ranks; see the module's docstring."""
    folder.mkdir(parents=True, exist_ok=True)
    issued = run_ranks(_record_rank, world_size, job, str(folder), steps, timeout=240)
    return Recording(folder, world_size, issued)
