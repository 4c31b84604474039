"""The core ops on real Gloo groups: every variant checks out, S and the bus factor follow nccl-tests."""

from __future__ import annotations

import pytest
import torch

from commbench.backends.torch_dist import FLAT_ALL_GATHER, FLAT_REDUCE_SCATTER, resolve_api
from commbench.ops.all_gather import AllGather
from commbench.ops.args import CollArgs
from commbench.ops.reduce_scatter_base import ReduceScatterBase
from commbench.ops.spec import Point
from commbench.run.harness import measure
from commbench.run.watchdog import Watchdog
from tests.support.broken_ops import CorruptAllGather, CorruptAllReduce, CorruptReduceScatter
from tests.support.distributed import run_ranks
from tests.support.op_cases import every_variant, run_cases

# Depends on torch's API: CI runs it again on the oldest torch it tests (.ci/run, -m torch_api).
pytestmark = pytest.mark.torch_api

DTYPES = ("float32", "bfloat16", "float16", "float64", "int32")


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 3])
def test_every_variant_and_dtype_is_correct(world):
    cases = [
        c for op_cls in (AllGather, ReduceScatterBase) for c in every_variant(op_cls, {}, DTYPES, (8, 1000, 65536))
    ]
    for result in run_ranks(run_cases, world, cases)[0]:
        assert result["wrong"] == 0
        assert result["count"] % world == 0 and result["count"] >= world
        assert result["calls"] == 1


@pytest.mark.slow
def test_sizes_round_to_a_multiple_of_world_size_and_report_bytes_moved():
    # 8 bytes of float32 on 3 ranks is 2 elements: rounded to 3 elements, 12 bytes reported.
    res = run_ranks(run_cases, 3, [(AllGather, {}, "flat", "float32", 8)])[0][0]
    assert (res["count"], res["s_bytes"], res["wrong"]) == (3, 12, 0)
    assert res["apis"] == resolve_api(FLAT_ALL_GATHER)  # the newest name this torch has


@pytest.mark.slow
@pytest.mark.parametrize("op_cls", [CorruptAllGather, CorruptReduceScatter, CorruptAllReduce])
def test_a_corrupted_op_is_caught_on_every_rank(op_cls):
    for result in run_ranks(run_cases, 2, every_variant(op_cls, {}, ("float32",), (1024,)))[0]:
        assert result["wrong"] == 2  # one element on each of the two ranks, summed over ranks


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


@pytest.mark.slow
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
    m = measure(
        op,
        args,
        "comm",
        iters=3,
        warmup=1,
        window=4,
        check=True,
        watchdog=Watchdog(60, backend.rank),
        label="nb",
        keep_per_rank=True,
    )
    unchecked = measure(
        op, args, "comm", iters=2, warmup=0, window=1, check=False, watchdog=Watchdog(60, backend.rank), label="nc"
    )
    return m.wrong, m.calls, len(m.samples_us), len(m.per_rank_us), unchecked.wrong


@pytest.mark.slow
def test_nonblocking_window_and_no_check():
    wrong, calls, samples, ranks, unchecked = run_ranks(_nonblocking, 2)[0]
    assert (wrong, calls, samples, ranks) == (0, 1.0, 3, 2)  # 4 ops per sample, still one call per op
    assert unchecked == -1


def _older_names_only(backend):
    """The backend on a torch that has only the oldest flat names (monkeypatched), still correct."""
    import types

    import torch.distributed as dist

    from commbench.backends import torch_dist

    old = types.SimpleNamespace(**{k: getattr(dist, k) for k in dir(dist) if not k.startswith("__")})
    for newer in (*FLAT_ALL_GATHER[:-1], *FLAT_REDUCE_SCATTER[:-1]):
        if hasattr(old, newer):
            delattr(old, newer)
    old._all_gather_base = dist.all_gather_into_tensor
    old._reduce_scatter_base = dist.reduce_scatter_tensor
    torch_dist.dist = old
    try:
        fresh = type(backend)()  # resolves its API names now, against the older torch
        fresh.rank, fresh.world_size, fresh.device = backend.rank, backend.world_size, backend.device
        results = run_cases(
            fresh,
            every_variant(AllGather, {}, ("float32",), (1024,))
            + every_variant(ReduceScatterBase, {}, ("float32",), (1024,)),
        )
        return fresh.flat_all_gather, fresh.flat_reduce_scatter, results
    finally:
        torch_dist.dist = dist


@pytest.mark.slow
def test_older_api_names_are_used_when_the_newer_ones_are_missing():
    gather_api, scatter_api, results = run_ranks(_older_names_only, 2)[0]
    assert (gather_api, scatter_api) == ("_all_gather_base", "_reduce_scatter_base")
    assert all(r["wrong"] == 0 for r in results)
    assert {r["apis"] for r in results if r["variant"] == "flat"} == {"_all_gather_base", "_reduce_scatter_base"}


def test_resolve_api_takes_the_newest_name_present(monkeypatch):
    import types

    from commbench.backends import torch_dist

    monkeypatch.setattr(torch_dist, "dist", types.SimpleNamespace(all_gather_into_tensor=1, _all_gather_base=2))
    assert resolve_api(FLAT_ALL_GATHER) == "all_gather_into_tensor"
    monkeypatch.setattr(torch_dist, "dist", types.SimpleNamespace())
    with pytest.raises(RuntimeError, match="none of"):
        resolve_api(FLAT_ALL_GATHER)
