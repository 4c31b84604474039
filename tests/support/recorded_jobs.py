"""Real training jobs on 2+ Gloo ranks, recorded by torch.profiler, ExecutionTraceObserver and the
Flight Recorder as a user would record them, with what each job issued observed apart from all three.

- record(job, folder, world_size=2, steps=3) -> Recording: runs `job` (a name in JOBS) on every rank
  of a real Gloo group under `torch.profiler.profile(record_shapes=True, schedule=warmup 1, active
  steps)` with an `ExecutionTraceObserver`, then a `barrier()` and a Flight Recorder dump
  (TORCH_FR_BUFFER_SIZE=2000, torch 2.13's default too). It writes rank{r}.kineto.json, rank{r}.et.json,
  rank{r}.fr.pkl and rank{r}.fr.json into folder, and returns what each rank issued: before the
  steps (set-up), in each step (the warm-up step apart), after them (the barrier).
- What a job issued is logged by wrappers around every torch.distributed function the jobs call
  (_Tap: all_reduce, broadcast, all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single,
  barrier, isend/irecv and, through them, send/recv/batch_isend_irecv), plus, for DDP, its module's
  buffers (DDP broadcasts them from C++ at each forward, past any wrapper). Collectives torch issues
  from C++ on its own (DDP's set-up broadcasts, its bucket rebuild in the first profiled step) are
  in no such log; they are in the traces and the dump.
- Recording.kineto / execution_traces / flight_recorder(rank=None): the files written (all ranks,
  or one rank's). Recording.steady(rank=0): the sequence of the profiled steps after the first,
  asserted equal across those steps.
- Issued.matches(call): whether a replay Call issues exactly this collective (op, variant, dtype,
  element counts, splits, group ranks). Issued also names the job's own group (`group`: "world",
  "dp", "tp", "solo0"...), the peer of a send/recv or root of a broadcast (global rank), and an
  all_to_all's splits in rows beside its splits in elements (`rows`, `row_width`).

The jobs (JOBS): "ddp" (Linear/BatchNorm model, 1 MB buckets, buffers broadcast each step; any world
size), "fsdp" (FSDP2 per layer: all_gather_into_tensor + reduce_scatter_tensor), "all_to_all"
(uneven all_to_all_single of a 1-D tensor), "moe" (dispatch and combine all_to_all_single of a
[tokens, 16] tensor, row splits drawn anew each step), "one_rank_group" (collectives on
new_group([r]) and one on the world), "two_groups" (a "dp" and a "tp" group over the same ranks),
"pipeline" (send/recv of activations forward and gradients back, 2 microbatches), "pipeline_batched"
(the same through batch_isend_irecv), "exposed" (each gradient's all_reduce waited right after it is
issued). Marked slow where used: they start processes.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.distributed import run_ranks

WARMUP = 1
FR_BUFFER_SIZE = "2000"
HIDDEN = 16  # the MoE job's row width


@dataclass(frozen=True)
class Issued:
    """One collective (or one side of a send/recv) as the job issued it (its own view, not a profiler's)."""

    op: str  # commbench's op name; "send"/"recv" for one side of a point-to-point transfer
    variant: str  # p2p: "send"/"recv" (blocking), "isend"/"irecv", "batch_isend_irecv"
    dtype: str
    in_elems: int
    out_elems: int
    group_ranks: tuple[int, ...]
    splits: tuple[tuple[int, ...], ...] = ()  # all_to_all: every rank's input splits in elements, [src][dst]
    group: str = "world"  # the job's own name for the group it issued on
    peer: int | None = None  # the other end of a send/recv, a broadcast's root: a global rank
    rows: tuple[tuple[int, ...], ...] = ()  # all_to_all: the same splits in rows of the tensor's dim 0
    row_width: int = 1  # elements per row (splits = rows x row_width)
    sent_rows: tuple[int, ...] = ()  # all_to_all: this rank's own input splits in rows (rows is every rank's)

    def matches(self, call: Any) -> bool:
        compared = ("op", "variant", "dtype", "in_elems", "out_elems", "group_ranks", "splits")
        return all(getattr(call, name) == getattr(self, name) for name in compared)


@dataclass
class Recording:
    folder: Path
    world_size: int
    issued: list[list[list[Issued]]] = field(default_factory=list)  # [rank][profiled step][k]
    warmup: list[list[list[Issued]]] = field(default_factory=list)  # [rank][warm-up step][k]
    setup: list[list[Issued]] = field(default_factory=list)  # [rank][k]: before the first step
    after: list[list[Issued]] = field(default_factory=list)  # [rank][k]: after the last (the barrier)

    def kineto(self, rank: int | None = None) -> list[str]:
        return self._files("kineto.json", rank)

    def execution_traces(self, rank: int | None = None) -> list[str]:
        return self._files("et.json", rank)

    def flight_recorder(self, rank: int | None = None, form: str = "pkl") -> list[str]:
        """The Flight Recorder dumps, pickle ("pkl", _dump_fr_trace) or JSON ("json", _dump_fr_trace_json)."""
        return self._files(f"fr.{form}", rank)

    def _files(self, suffix: str, rank: int | None) -> list[str]:
        ranks = range(self.world_size) if rank is None else range(rank, rank + 1)
        return [str(self.folder / f"rank{r}.{suffix}") for r in ranks]

    def steady(self, rank: int = 0) -> list[Issued]:
        later = self.issued[rank][1:]
        assert later and all(s == later[0] for s in later), later
        return later[0]


def _dtype(t: Any) -> str:
    return str(t.dtype).removeprefix("torch.")


class _Tap:
    """Wrappers around torch.distributed's functions that log what the job calls, then call them.

    Each wrapper binds the call to the function's own signature, so positional and keyword
    arguments read alike. isend/irecv are wrapped in torch.distributed.distributed_c10d too: send,
    recv and batch_isend_irecv call them there (and P2POp checks its op against them), and they log
    each transfer under the name of the outer call (`via`)."""

    P2P = ("isend", "irecv")
    OUTER = ("send", "recv", "batch_isend_irecv")

    def __init__(self, log: list[Issued], world: int) -> None:
        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d

        self.log, self.world, self.dist = log, world, dist
        self.labels: dict[int, str] = {}
        self.via: list[str] = []
        self.saved: list[tuple[Any, str, Any]] = []
        describe = {
            "all_reduce": self._in_place("all_reduce"),
            "broadcast": self._in_place("broadcast"),
            "all_gather_into_tensor": self._flat("all_gather"),
            "all_gather_single": self._flat("all_gather"),
            "reduce_scatter_tensor": self._flat("reduce_scatter_base"),
            "reduce_scatter_single": self._flat("reduce_scatter_base"),
            "all_to_all_single": self._all_to_all,
            "barrier": self._barrier,
            "isend": self._p2p,
            "irecv": self._p2p,
        }
        for name, describes in describe.items():
            if hasattr(dist, name):
                self._wrap(name, describes, [dist, c10d] if name in self.P2P else [dist])
        for name in self.OUTER:
            self._wrap(name, None, [dist])

    def name(self, group: Any, label: str) -> None:
        """Give a group the job made its name in the log ("dp", "tp", "solo0")."""
        self.labels[id(group)] = label

    def _wrap(self, name: str, describes: Callable[..., Issued] | None, modules: list[Any]) -> None:
        original = getattr(modules[0], name)
        signature = inspect.signature(original)

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            if describes is not None:
                self.log.append(describes(name, bound.arguments))
                return original(*args, **kwargs)
            self.via.append(name)
            try:
                return original(*args, **kwargs)
            finally:
                self.via.pop()

        for module in modules:
            self.saved.append((module, name, getattr(module, name)))
            setattr(module, name, wrapper)

    def _group(self, group: Any) -> tuple[str, tuple[int, ...]]:
        dist = self.dist
        if group is None or group is dist.group.WORLD:
            return "world", tuple(range(self.world))
        label = self.labels.get(id(group), f"pg {dist.distributed_c10d._get_process_group_name(group)}")
        return label, tuple(dist.get_process_group_ranks(group))

    def _in_place(self, op: str) -> Callable[[str, dict[str, Any]], Issued]:
        def describe(_name: str, a: dict[str, Any]) -> Issued:
            t = a["tensor"]
            label, ranks = self._group(a["group"])
            root = a.get("src")
            if op == "broadcast" and root is None:
                root = ranks[a["group_src"]]
            return Issued(op, "flat", _dtype(t), t.numel(), t.numel(), ranks, group=label, peer=root)

        return describe

    def _flat(self, op: str) -> Callable[[str, dict[str, Any]], Issued]:
        def describe(_name: str, a: dict[str, Any]) -> Issued:
            out = a.get("output_tensor", a.get("output"))
            inp = a.get("input_tensor", a.get("input"))
            label, ranks = self._group(a["group"])
            return Issued(op, "flat", _dtype(inp), inp.numel(), out.numel(), ranks, group=label)

        return describe

    def _all_to_all(self, _name: str, a: dict[str, Any]) -> Issued:
        inp, out = a["input"], a["output"]
        label, ranks = self._group(a["group"])
        width = inp.numel() // inp.shape[0] if inp.dim() and inp.shape[0] else 1
        rows = tuple(a["input_split_sizes"] or [inp.shape[0] // len(ranks)] * len(ranks))
        variant = "uneven" if a["input_split_sizes"] else "single"
        return Issued(
            "all_to_all", variant, _dtype(inp), inp.numel(), out.numel(), ranks, group=label, row_width=width,
            sent_rows=rows,
        )  # fmt: skip

    def _barrier(self, _name: str, a: dict[str, Any]) -> Issued:
        label, ranks = self._group(a["group"])
        return Issued("barrier", "barrier", "", 0, 0, ranks, group=label)

    def _p2p(self, name: str, a: dict[str, Any]) -> Issued:
        t = a["tensor"]
        label, ranks = self._group(a["group"])
        end = "dst" if name == "isend" else "src"
        peer = a[end] if a[end] is not None else ranks[a[f"group_{end}"]]
        via = self.via[-1] if self.via else name
        return Issued(name.removeprefix("i"), via, _dtype(t), t.numel(), t.numel(), ranks, group=label, peer=peer)

    def close(self) -> None:
        for module, name, original in reversed(self.saved):
            setattr(module, name, original)


def _ddp(tap: _Tap) -> Callable[[], None]:
    import torch
    import torch.distributed as dist

    world = tap.world
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 512), torch.nn.BatchNorm1d(512), torch.nn.Linear(512, 512), torch.nn.Linear(512, 8)
    )
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1)

    def hook(_state, bucket):  # type: ignore[no-untyped-def]  # DDP refuses a hook whose annotations are strings
        return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda f: f.value()[0].div_(world))

    ddp.register_comm_hook(None, hook)
    # DDP broadcasts the module's buffers at each forward, coalesced into one flat tensor per dtype
    by_dtype: dict[str, int] = {}
    for b in model.buffers():
        by_dtype[_dtype(b)] = by_dtype.get(_dtype(b), 0) + b.numel()
    buffers = [Issued("broadcast", "flat", d, n, n, tuple(range(world)), peer=0) for d, n in by_dtype.items()]
    optim = torch.optim.SGD(ddp.parameters(), lr=0.01)

    def step() -> None:
        tap.log.extend(buffers)
        ddp(torch.randn(8, 64)).sum().backward()
        optim.step()
        optim.zero_grad()

    return step


def _fsdp(_tap: _Tap) -> Callable[[], None]:
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


def _all_to_all(tap: _Tap) -> Callable[[], None]:
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(), tap.world
    splits = tuple(tuple(1 + (src * world + dst) % 3 + src for dst in range(world)) for src in range(world))
    send, receive = splits[rank], [row[rank] for row in splits]

    def step() -> None:
        out = torch.empty(sum(receive), dtype=torch.float64)
        dist.all_to_all_single(out, torch.arange(sum(send), dtype=torch.float64), receive, list(send))

    return step


def _moe(tap: _Tap) -> Callable[[], None]:
    """MoE routing: each step the router sends rows[src][dst] tokens (rows of HIDDEN floats) from
    rank src to rank dst's experts, drawn anew each step (seeded alike on every rank, as a router's
    counts are exchanged), then the experts' outputs go back by the transposed splits."""
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(), tap.world
    draws = torch.Generator().manual_seed(45)

    def step() -> None:
        rows = torch.randint(1, 9, (world, world), generator=draws).tolist()
        send, receive = rows[rank], [row[rank] for row in rows]
        tokens = torch.randn(sum(send), HIDDEN)
        routed = torch.empty(sum(receive), HIDDEN)
        dist.all_to_all_single(routed, tokens, receive, send)  # dispatch
        combined = torch.empty_like(tokens)
        dist.all_to_all_single(combined, routed * 2, send, receive)  # combine

    return step


def _one_rank_group(tap: _Tap) -> Callable[[], None]:
    import torch
    import torch.distributed as dist

    rank = dist.get_rank()
    solo = [dist.new_group([r]) for r in range(tap.world)][rank]  # every rank makes every group, in one order
    tap.name(solo, f"solo{rank}")

    def step() -> None:
        dist.all_reduce(torch.ones(128), group=solo)
        dist.all_gather_into_tensor(torch.empty(32), torch.ones(32), group=solo)
        dist.all_reduce(torch.ones(100))

    return step


def _two_groups(tap: _Tap) -> Callable[[], None]:
    """Data-parallel and tensor-parallel groups over the same ranks: one all_reduce of the same
    size on each, so only the group tells them apart."""
    import torch
    import torch.distributed as dist

    everyone = list(range(tap.world))
    dp, tp = dist.new_group(everyone), dist.new_group(everyone)
    tap.name(dp, "dp")
    tap.name(tp, "tp")

    def step() -> None:
        dist.all_reduce(torch.ones(256), group=tp)
        dist.all_gather_into_tensor(torch.empty(64 * tap.world), torch.ones(64), group=tp)
        dist.all_reduce(torch.ones(256), group=dp)
        dist.all_reduce(torch.ones(1000), group=dp)

    return step


def _pipeline(tap: _Tap) -> Callable[[], None]:
    """Two stages, two microbatches of [4, 32] activations: rank 0 sends them forward, rank 1 sends
    their gradients back."""
    import torch
    import torch.distributed as dist

    assert tap.world == 2, "the pipeline jobs have two stages"
    first = dist.get_rank() == 0
    peer = 1 - dist.get_rank()

    def step() -> None:
        for _ in range(2):
            act = torch.randn(4, 32)
            dist.send(act, peer) if first else dist.recv(act, peer)
        for _ in range(2):
            grad = torch.randn(4, 32)
            dist.recv(grad, peer) if first else dist.send(grad, peer)

    return step


def _pipeline_batched(tap: _Tap) -> Callable[[], None]:
    """The pipeline's 1F1B with batch_isend_irecv: microbatch 0 forward; microbatch 1 forward
    batched with microbatch 0's gradient back; microbatch 1's gradient back."""
    import torch
    import torch.distributed as dist

    assert tap.world == 2, "the pipeline jobs have two stages"
    first = dist.get_rank() == 0
    peer = 1 - dist.get_rank()
    forward, backward = (dist.isend, dist.irecv) if first else (dist.irecv, dist.isend)

    def step() -> None:
        for batch in ([forward], [forward, backward], [backward]):
            ops = [dist.P2POp(op, torch.randn(4, 32), peer) for op in batch]
            for work in dist.batch_isend_irecv(ops):
                work.wait()

    return step


def _exposed(tap: _Tap) -> Callable[[], None]:
    """Data parallel by hand: each gradient's all_reduce is waited right after it is issued, so
    none overlaps anything."""
    import torch
    import torch.distributed as dist

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
    optim = torch.optim.SGD(model.parameters(), lr=0.01)

    def step() -> None:
        model(torch.randn(8, 64)).sum().backward()
        for p in model.parameters():
            dist.all_reduce(p.grad, async_op=True).wait()
            p.grad /= tap.world
        optim.step()
        optim.zero_grad()

    return step


JOBS: dict[str, Callable[[_Tap], Callable[[], None]]] = {
    "ddp": _ddp,
    "fsdp": _fsdp,
    "all_to_all": _all_to_all,
    "moe": _moe,
    "one_rank_group": _one_rank_group,
    "two_groups": _two_groups,
    "pipeline": _pipeline,
    "pipeline_batched": _pipeline_batched,
    "exposed": _exposed,
}


def _dump_flight_recorder(folder: str, rank: int) -> None:
    from torch._C._distributed_c10d import _dump_fr_trace, _dump_fr_trace_json

    Path(f"{folder}/rank{rank}.fr.pkl").write_bytes(_dump_fr_trace())
    Path(f"{folder}/rank{rank}.fr.json").write_bytes(_dump_fr_trace_json())


def _record_rank(_backend: Any, job: str, folder: str, steps: int) -> dict[str, Any]:
    import torch.distributed as dist
    from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, schedule

    rank, world = dist.get_rank(), dist.get_world_size()
    log: list[Issued] = []
    tap = _Tap(log, world)
    try:
        step = JOBS[job](tap)
        setup = list(log)
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
        log.clear()
        dist.barrier()  # as a job's end does, before a rank dumps or exits
        _dump_flight_recorder(folder, rank)
        return {"setup": setup, "steps": per_step, "after": list(log)}
    finally:
        tap.close()


def _with_split_matrices(steps: list[list[list[Issued]]]) -> list[list[list[Issued]]]:
    """Every rank's all_to_alls given the whole split matrix, [src][dst], in rows and in elements:
    each rank logged only its own row; the k-th all_to_all of a group in a step is one call on all
    of the group's ranks. steps: [rank][step][k]."""
    out = [[list(s) for s in rank] for rank in steps]
    for k in range(len(steps[0])):
        calls: dict[tuple[str, int], dict[int, int]] = defaultdict(dict)  # (group, n-th) -> rank -> index
        for rank, issued in enumerate(steps):
            seen: dict[str, int] = defaultdict(int)
            for i, c in enumerate(issued[k]):
                if c.op == "all_to_all":
                    calls[(c.group, seen[c.group])][rank] = i
                    seen[c.group] += 1
        for at in calls.values():
            first = steps[next(iter(at))][k][next(iter(at.values()))]
            rows = tuple(steps[r][k][at[r]].sent_rows for r in first.group_ranks)
            elems = tuple(tuple(n * first.row_width for n in row) for row in rows)
            for rank, i in at.items():
                out[rank][k][i] = dataclasses.replace(out[rank][k][i], rows=rows, splits=elems)
    return out


def record(job: str, folder: Path, world_size: int = 2, steps: int = 3) -> Recording:
    """Run and record `job` on world_size real Gloo ranks; see the module's docstring."""
    folder.mkdir(parents=True, exist_ok=True)
    # read by the ranks' Flight Recorder when it is first used (the default group's creation); the
    # ranks fork from a forkserver that inherits this environment when it starts
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", FR_BUFFER_SIZE)
    ranks = run_ranks(_record_rank, world_size, job, str(folder), steps, timeout=240)
    every = _with_split_matrices([r["steps"] for r in ranks])
    return Recording(
        folder,
        world_size,
        issued=[r[WARMUP:] for r in every],
        warmup=[r[:WARMUP] for r in every],
        setup=[r["setup"] for r in ranks],
        after=[r["after"] for r in ranks],
    )
