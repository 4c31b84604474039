"""The core ops on real Gloo groups: every variant checks out, S and the bus factor follow nccl-tests."""

from __future__ import annotations

import pytest
import torch

from commbench.run.harness import CollArgs, measure
from commbench.ops.all_gather import AllGather
from commbench.ops.base import Point
from commbench.ops.reduce_scatter_base import ReduceScatterBase
from commbench.run.watchdog import Watchdog
from tests.broken_ops import CorruptAllGather, CorruptAllReduce, CorruptReduceScatter
from tests.distributed import run_ranks
from tests.op_cases import every_variant, run_cases

DTYPES = ("float32", "bfloat16", "float16", "float64", "int32")


@pytest.mark.parametrize("world", [2, 3])
def test_every_variant_and_dtype_is_correct(world):
    cases = [c for op_cls in (AllGather, ReduceScatterBase) for c in every_variant(op_cls, {}, DTYPES, (8, 1000, 65536))]
    for result in run_ranks(run_cases, world, cases)[0]:
        assert result["wrong"] == 0
        assert result["count"] % world == 0 and result["count"] >= world
        assert result["calls"] == 1


def test_sizes_round_to_a_multiple_of_world_size_and_report_bytes_moved():
    # 8 bytes of float32 on 3 ranks is 2 elements: rounded to 3 elements, 12 bytes reported.
    res = run_ranks(run_cases, 3, [(AllGather, {}, "flat", "float32", 8)])[0][0]
    assert (res["count"], res["s_bytes"], res["wrong"]) == (3, 12, 0)
    assert res["apis"] == "all_gather_single"


@pytest.mark.parametrize("op_cls", [CorruptAllGather, CorruptReduceScatter, CorruptAllReduce])
def test_a_corrupted_op_is_caught_on_every_rank(op_cls):
    for result in run_ranks(run_cases, 2, every_variant(op_cls, {}, ("float32",), (1024,)))[0]:
        assert result["wrong"] == 2  # one element on each of the two ranks, summed over ranks


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_s_and_bus_factor(n):
    class FakeBackend:
        rank, world_size, device = 0, n, torch.device("cpu")

    for op_cls in (AllGather, ReduceScatterBase):
        op = op_cls()
        args = CollArgs(backend=FakeBackend(), dtype=torch.float32, variant="flat")
        op.setup(args, Point.of_size(1 << 20))
        per_rank = round((1 << 20) / 4 / n)
        assert args.count == per_rank * n
        assert op.size_bytes(args, "comm") == per_rank * n * 4
        assert op.bus_factor(n) == pytest.approx((n - 1) / n)


def _grouped(backend):
    r = backend.rank
    ins = [torch.full((k,), float(r + 1)) for k in (1, 3)]
    outs = [torch.zeros(k * backend.world_size) for k in (1, 3)]
    backend.all_gather_group(outs, ins).wait()
    sums = [torch.full((2,), float(r + 1)) for _ in range(2)]
    backend.all_reduce_group(sums).wait()
    rs_out = [torch.zeros(2)]
    backend.reduce_scatter_group(rs_out, [torch.arange(4.0)]).wait()
    return [o.tolist() for o in outs], [s.tolist() for s in sums], rs_out[0].tolist(), dict(backend.calls)


def test_grouped_collectives_over_torchs_coalescing_manager():
    res = run_ranks(_grouped, 2)
    outs, sums, rs, calls = res[1]
    assert outs == [[1.0, 2.0], [1.0, 1.0, 1.0, 2.0, 2.0, 2.0]]
    assert sums == [[3.0, 3.0], [3.0, 3.0]]
    assert rs == [4.0, 6.0]  # shard 1 of arange(4) summed over 2 ranks
    assert sum(calls.values()) == 3  # one grouped operation each


def _nonblocking(backend):
    op = AllGather()
    args = CollArgs(backend=backend, dtype=torch.float32, variant="flat")
    op.setup(args, Point.of_size(4096))
    m = measure(op, args, "comm", iters=3, warmup=1, window=4, check=True, watchdog=Watchdog(60, backend.rank), label="nb")
    unchecked = measure(op, args, "comm", iters=2, warmup=0, window=1, check=False, watchdog=Watchdog(60, backend.rank), label="nc")
    return m.wrong, m.calls, len(m.samples_us), len(m.per_rank_us), unchecked.wrong


def test_nonblocking_window_and_no_check():
    wrong, calls, samples, ranks, unchecked = run_ranks(_nonblocking, 2)[0]
    assert (wrong, calls, samples, ranks) == (0, 1.0, 3, 2)  # 4 ops per sample, still one call per op
    assert unchecked == -1
