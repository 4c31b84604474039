"""Values written and checked chunk by chunk: the same numbers as the full-size formulas they replaced,
and a single wrong element is caught wherever it lies."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from commbench.ops import values
from commbench.ops.all_gather import AllGather
from commbench.ops.all_reduce import AllReduce
from commbench.ops.all_to_all import AllToAll
from commbench.ops.args import CollArgs
from commbench.ops.base import Op, Point
from commbench.ops.broadcast import Broadcast
from commbench.ops.bucketed_all_reduce import BucketedAllReduce
from commbench.ops.bucketed_reduce_scatter import BucketedReduceScatter
from commbench.ops.bucketer import average_
from commbench.ops.gather import Gather
from commbench.ops.grouped_all_gather import GroupedAllGather
from commbench.ops.reduce import Reduce
from commbench.ops.reduce_scatter_base import ReduceScatterBase
from commbench.ops.scatter import Scatter
from commbench.ops.sendrecv import SendRecv
from commbench.ops.values import Values, summed

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64)


# -- the formulas as they were before chunking: full-size int64 temporaries, kept here as the reference --
def old_contribution(rank: int, count: int, dtype: Any) -> Any:
    return ((torch.arange(count) + 3 * rank) % 11 + 1).to(dtype)


def old_scatter_values(rank: int, g: Any, shard: int) -> Any:
    return (g + g // shard) % 7 + 1 + rank % 2


def old_stat_values(rank: int, tensor: int, count: int, dtype: Any) -> Any:
    return ((torch.arange(count) + 3 * rank + 5 * tensor) % 13 + 1).to(dtype)


def old_gradient_values(rank: int, tensor: int, numel: int, index: Any) -> Any:
    return ((index + 7 * tensor) % 13 + 1 + rank % 3) * (index < numel)


def old_chunk_values(rank: int, splits: list[int], sending: bool, dtype: Any) -> Any:
    sizes = torch.tensor(splits)
    peer = torch.repeat_interleave(torch.arange(len(splits)), sizes)
    index = torch.arange(int(sizes.sum())) - (torch.cumsum(sizes, 0) - sizes)[peer]
    values = (3 * rank + 5 * peer + index) % 13 + 1 if sending else (3 * peer + 5 * rank + index) % 13 + 1
    return values.to(dtype)


class FakeBackend:
    """Enough of a backend for setup, fill and the check, without a process group."""

    reduce_keeps_non_root = True

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank, self.world_size, self.device = rank, world_size, torch.device("cpu")

    def reduce_scatter_flat(self, output: Any, input: Any) -> Any:
        raise AssertionError("no collective runs here")

    all_reduce = reduce_scatter_flat


@dataclass
class Case:
    op: Op
    variant: str
    size: int
    old_inputs: Callable[[int, int, Any, CollArgs], list[Any]]  # (rank, n, dtype, args) -> inputs as before
    old_result: Callable[[int, int, Any, CollArgs], list[Any]]  # ... -> the result as expected before
    result: Callable[[CollArgs], list[Any]]  # the tensors that hold the result, in order


def _listed(x: Any) -> list[Any]:
    return [] if x is None else [x] if torch.is_tensor(x) else list(x)


def _gather_inputs(r, n, dtype, args):
    return [old_contribution(r, args.count // n, dtype)]


def _gathered(r, n, dtype, args):
    return [torch.cat([old_contribution(q, args.count // n, dtype) for q in range(n)])]


def _scatter_inputs(r, n, dtype, args):
    return [old_scatter_values(r, torch.arange(args.count), args.count // n).to(dtype)]


def _scattered(r, n, dtype, args):
    shard = args.count // n
    mine = torch.arange(r * shard, (r + 1) * shard)
    return [sum(old_scatter_values(q, mine, shard) for q in range(n)).to(dtype)]


def _reduce_inputs(r, n, dtype, args):
    return [old_contribution(r, args.count, dtype)]


def _reduced(r, n, dtype, args):
    return [sum(old_contribution(q, args.count, dtype) for q in range(n))]


def _stat_inputs(r, n, dtype, args):
    return [old_stat_values(r, i, t.numel(), dtype) for i, t in enumerate(args.input)]


def _stats_gathered(r, n, dtype, args):
    return [torch.stack([old_stat_values(q, i, t.numel(), dtype) for q in range(n)]) for i, t in enumerate(args.input)]


NUMELS = (5, 5, 5, 7, 1, 33, 33, 4, 300)
TENSORS = {"tensors": ",".join(map(str, NUMELS))}


def _padded(k: int, n: int) -> int:
    return -(-k // n) * n


def _grad_inputs(padding: bool):
    def inputs(r, n, dtype, args):
        return [
            old_gradient_values(r, i, k, torch.arange(_padded(k, n) if padding else k, dtype=torch.int32)).to(dtype)
            for i, k in enumerate(NUMELS)
        ]

    return inputs


def _grad_shards(r, n, dtype, args):
    out = []
    for i, k in enumerate(NUMELS):
        shard = _padded(k, n) // n
        mine = torch.arange(r * shard, (r + 1) * shard, dtype=torch.int32)
        out.append(sum(old_gradient_values(q, i, k, mine) for q in range(n)).to(dtype))
    return out


def _grad_averages(r, n, dtype, args):
    return [
        average_(sum(old_gradient_values(q, i, k, torch.arange(k, dtype=torch.int32)) for q in range(n)).to(dtype), n)
        for i, k in enumerate(NUMELS)
    ]


def _outputs(args):
    return _listed(args.output)


def _in_place(args):
    return _listed(args.input)


def _rows(args):
    return list(args.output)


def _per_rank(args):
    return args.count // args.backend.world_size


def _broadcast_inputs(r, n, dtype, args):
    return [old_contribution(0, args.count, dtype) if r == 0 else torch.zeros(args.count, dtype=dtype)]


def _broadcast(r, n, dtype, args):
    return [old_contribution(0, args.count, dtype)]


def _reduced_at_root(r, n, dtype, args):
    return _reduced(r, n, dtype, args) if r == 0 else _reduce_inputs(r, n, dtype, args)


def _own(r, n, dtype, args):
    return [old_contribution(r, _per_rank(args), dtype)]


def _every(r, n, dtype, args):
    return [torch.cat([old_contribution(q, _per_rank(args), dtype) for q in range(n)])]


def _gather_result(r, n, dtype, args):
    return [*(_every(r, n, dtype, args) if r == 0 else []), *_own(r, n, dtype, args)]


def _gather_results(args):
    return [*_listed(args.output), args.input]


def _scatter_inputs_root(r, n, dtype, args):
    return _every(r, n, dtype, args) if r == 0 else []


def _scatter_result(r, n, dtype, args):
    return [*_own(r, n, dtype, args), *(_every(r, n, dtype, args) if r == 0 else [])]


def _scatter_results(args):
    return [args.output, *_listed(args.input)]


def _ring_received(r, n, dtype, args):
    return [old_contribution((r - 1) % n, args.count, dtype)]


def _routed_inputs(r, n, dtype, args):
    return [old_chunk_values(r, args.state.send, True, dtype)]


def _routed(r, n, dtype, args):
    return [old_chunk_values(r, args.state.receive, False, dtype)]


CASES = {
    "all_gather/flat": Case(AllGather(), "flat", 4000, _gather_inputs, _gathered, _outputs),
    "all_gather/list": Case(AllGather(), "list", 4000, _gather_inputs, _gathered, _outputs),
    "reduce_scatter_base/flat": Case(ReduceScatterBase(), "flat", 4000, _scatter_inputs, _scattered, _outputs),
    "reduce_scatter_base/list": Case(ReduceScatterBase(), "list", 4000, _scatter_inputs, _scattered, _outputs),
    "all_reduce": Case(AllReduce(), "flat", 4000, _reduce_inputs, _reduced, _in_place),
    "grouped_all_gather/concat": Case(GroupedAllGather(), "concat", 1000, _stat_inputs, _stats_gathered, _rows),
    "grouped_all_gather/separate": Case(GroupedAllGather(), "separate", 1000, _stat_inputs, _stats_gathered, _rows),
    "bucketed_reduce_scatter": Case(
        BucketedReduceScatter(TENSORS), "flat", 1, _grad_inputs(True), _grad_shards, _outputs
    ),
    "bucketed_all_reduce": Case(
        BucketedAllReduce(TENSORS), "per_tensor", 1, _grad_inputs(False), _grad_averages, _in_place
    ),
    "all_gather/inplace": Case(AllGather(), "inplace", 4000, _gather_inputs, _gathered, _outputs),
    "reduce_scatter_base/inplace": Case(ReduceScatterBase(), "inplace", 4000, _scatter_inputs, _scattered, _outputs),
    "broadcast": Case(Broadcast(), "flat", 4000, _broadcast_inputs, _broadcast, _in_place),
    "reduce": Case(Reduce(), "flat", 4000, _reduce_inputs, _reduced_at_root, _in_place),
    "gather": Case(Gather(), "flat", 4000, _own, _gather_result, _gather_results),
    "scatter": Case(Scatter(), "flat", 4000, _scatter_inputs_root, _scatter_result, _scatter_results),
    "sendrecv/ring": Case(SendRecv(), "ring", 4000, _reduce_inputs, _ring_received, _outputs),
    "all_to_all/single": Case(AllToAll(), "single", 4000, _routed_inputs, _routed, _outputs),
    "all_to_all/list": Case(AllToAll(), "list", 4000, _routed_inputs, _routed, _outputs),
    "all_to_all/uneven": Case(AllToAll(), "uneven", 4000, _routed_inputs, _routed, _outputs),
}


def _set_up(case: Case, rank: int, n: int, dtype: Any) -> CollArgs:
    args = CollArgs(backend=FakeBackend(rank, n), dtype=dtype, variant=case.variant)  # type: ignore[arg-type]
    case.op.setup(args, Point.of_size(case.size * torch.empty((), dtype=dtype).element_size()))
    case.op.fill(args)
    return args


def _write(targets: list[Any], sources: list[Any]) -> None:
    """Copy the sources, taken one after the other, into the targets taken so."""
    flat = torch.cat([t.reshape(-1) for t in sources])
    assert flat.numel() == sum(t.numel() for t in targets)
    for t, part in zip(targets, flat.split([t.numel() for t in targets])):
        t.copy_(part.view(t.shape))


@pytest.fixture(params=[None, 50], ids=["chunk=default", "chunk=50"])
def chunk(request, monkeypatch):
    """The default chunk, and one so small (and prime to every period) that every buffer spans many."""
    if request.param:
        monkeypatch.setattr(values, "CHUNK", request.param)


@pytest.fixture
def small_chunk(monkeypatch):
    monkeypatch.setattr(values, "CHUNK", 50)


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [2, 3])
def test_fill_and_check_give_the_values_of_the_old_formulas(name, dtype, n, small_chunk):
    case = CASES[name]
    for rank in range(n):
        args = _set_up(case, rank, n, dtype)
        inputs = [t.reshape(-1) for t in _listed(args.input)]
        old = [t.reshape(-1) for t in case.old_inputs(rank, n, dtype, args)]
        assert torch.equal(
            torch.cat([*inputs, torch.empty(0, dtype=dtype)]), torch.cat([*old, torch.empty(0, dtype=dtype)])
        )
        for out in [] if case.variant == "inplace" else _listed(args.output):  # in place, the input is in it
            assert not out.any()  # cleared, so a stale result cannot pass
        _write(case.result(args), case.old_result(rank, n, dtype, args))
        assert case.op.wrong(args, "comm") == 0


def _element(tensors: list[Any], position: int) -> Any:
    """A 0-d view of the element at this position of the tensors taken one after the other."""
    for t in tensors:
        if position < t.numel():
            return t[tuple(int(i) for i in torch.unravel_index(torch.tensor(position), t.shape))]
        position -= t.numel()
    raise IndexError(position)


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32], ids=str)
def test_one_wrong_element_is_caught_first_middle_and_last(name, dtype, chunk):
    case = CASES[name]
    args = _set_up(case, 1, 2, dtype)
    results = case.result(args)
    _write(results, case.old_result(1, 2, dtype, args))
    total = sum(t.numel() for t in results)
    for position in (0, total // 2, total - 1):
        element = _element(results, position)
        element += 3
        assert case.op.wrong(args, "comm") == 1, position
        element -= 3
    assert case.op.wrong(args, "comm") == 0


@pytest.mark.parametrize("period", [None, 7, 11])
def test_a_large_buffer_is_checked_to_its_last_element(period):
    """Several default chunks, and a tail that is not a whole chunk or a whole period."""
    v = Values(lambda i: i % 7 + 1, period) if period == 7 else Values(lambda i: (i * 5) % 11 + 1, period)
    count = 3 * values.CHUNK + 13
    buffer = torch.empty(count, dtype=torch.float32)
    v.write(buffer, start=5)
    assert torch.equal(buffer, v.formula(torch.arange(5, 5 + count)).to(torch.float32))
    for position in (0, values.CHUNK - 1, values.CHUNK, count // 2, count - 1):
        buffer[position] += 2
        assert v.wrong(buffer, start=5) == 1, position
        buffer[position] -= 2
    assert v.wrong(buffer, start=5) == 0


def test_summed_values_repeat_with_the_common_period():
    parts = [Values(lambda i: i % 2, 2), Values(lambda i: i % 3, 3)]
    assert summed(parts).period == 6
    assert summed([*parts, Values(lambda i: i * 0)]).period is None
    assert torch.equal(summed(parts).at(0, 12, "cpu"), torch.arange(12) % 2 + torch.arange(12) % 3)


def test_a_check_reads_the_device_once_per_buffer_not_once_per_chunk():
    """The wrong counts of every chunk add up on the device: one .item() (a host synchronisation on
    a GPU) per buffer, where there was one per 64 Ki elements."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from commbench.ops.values import CHUNK, Values

    class CountReads(TorchDispatchMode):
        reads = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket.__name__ == "_local_scalar_dense":
                CountReads.reads += 1
            return func(*args, **(kwargs or {}))

    for known in (Values(lambda j: j % 5 + 1), Values(lambda j: j % 5 + 1, period=5)):
        buffer = torch.empty(5 * CHUNK + 3)
        known.write(buffer)
        buffer[7] = -1.0
        buffer[4 * CHUNK + 1] = -1.0
        CountReads.reads = 0
        with CountReads():
            assert known.wrong(buffer) == 2
        assert CountReads.reads == 1


def _ring_sum_in(dtype, parts):
    """A ring reduction as NCCL runs it: each hop adds one rank's values to the partial sum and the
    result is stored in the buffer's type (one rounding per hop)."""
    total = parts[0].to(dtype)
    for part in parts[1:]:
        total = (total.float() + part.to(dtype).float()).to(dtype)
    return total


@pytest.mark.parametrize("ranks", [2, 16, 48, 256])
def test_half_sums_at_many_ranks_are_not_reported_wrong(ranks):
    """bfloat16 integers are exact to 256: past it (about 24 ranks of values up to 11) each hop of a
    ring rounds, and the tolerance grows with the rank count instead of reporting spurious rows."""
    from commbench.ops.values import contribution, sum_tolerance, summed

    expected = summed([contribution(r) for r in range(ranks)])
    n = 4096
    parts = [contribution(r).at(0, n, "cpu").double() for r in range(ranks)]
    for dtype in (torch.bfloat16, torch.float16):
        result = _ring_sum_in(dtype, parts)
        assert expected.wrong(result) == 0, (dtype, ranks)
    assert (sum_tolerance(torch.bfloat16, ranks, expected.largest) is None) == (11 * ranks <= 256)
    assert sum_tolerance(torch.float16, 48, summed([contribution(r) for r in range(48)]).largest) is None
    assert sum_tolerance(torch.float32, ranks, expected.largest) is None


def test_a_lost_contribution_is_still_wrong_where_the_sums_are_exact():
    from commbench.ops.values import contribution, summed

    parts = [contribution(r).at(0, 1000, "cpu").double() for r in range(16)]
    short = _ring_sum_in(torch.bfloat16, parts[:-1])  # one rank's values missing
    assert summed([contribution(r) for r in range(16)]).wrong(short) == 1000
