"""bucketed_reduce_scatter, all_reduce and bucketed_all_reduce on real Gloo groups."""

from __future__ import annotations

import pytest

from commbench.ops import choose_variants
from commbench.ops.all_reduce import AllReduce
from commbench.ops.args import complete
from commbench.ops.bucketed_all_reduce import BucketedAllReduce
from commbench.ops.bucketed_reduce_scatter import BucketedReduceScatter
from commbench.ops.gradients import DEFAULT_GRADIENTS
from tests.support.distributed import run_ranks
from tests.support.op_cases import every_variant, run_cases

# Sizes that are not multiples of 2 or 3, and caps small enough (in MB) to take every bucketer path:
# 0 disables, 0.0001 MB holds 13 float32 elements per shard on 2 ranks (the 33s are oversize), 1 holds all.
TENSORS = {"tensors": "3x5,7,1,2x33,4"}
RS_OPTIONS = {**TENSORS, "bucket_cap_mb": "0,0.0001,1"}
AR_OPTIONS = {**TENSORS, "message_size": "8,40,1e7"}


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 3])
def test_every_variant_is_correct(world):
    cases = (
        every_variant(BucketedReduceScatter, RS_OPTIONS, ("float32", "bfloat16", "int32"), (1,))
        + every_variant(BucketedAllReduce, AR_OPTIONS, ("float32", "float16", "int64"), (1,))
        + every_variant(AllReduce, {}, ("float32", "int32"), (8, 1000, 4096))
    )
    results = run_ranks(run_cases, world, cases)[0]
    assert all(r["wrong"] == 0 for r in results), [r for r in results if r["wrong"]]
    variants = {r["variant"] for r in results}
    assert variants >= {
        "per_tensor",
        "bucketed_0MB",
        "bucketed_0.0001MB",
        "bucketed_1MB",
        "flat",
        "bucketed_8",
        "bucketed_40",
        "bucketed_1e7",
    }


@pytest.mark.slow
def test_calls_per_step_show_the_buckets():
    results = run_ranks(
        run_cases,
        2,
        every_variant(BucketedReduceScatter, RS_OPTIONS, ("float32",), (1,))
        + every_variant(BucketedAllReduce, AR_OPTIONS, ("float32",), (1,)),
    )[0]
    calls = {r["variant"]: r["calls"] for r in results}
    # 8 tensors: per_tensor and a disabled bucket reduce each alone; 1 MB and flat hold all of them.
    assert calls["per_tensor"] == 8 and calls["bucketed_0MB"] == 8
    assert calls["bucketed_1MB"] == 1 and calls["flat"] == 1
    assert 1 < calls["bucketed_0.0001MB"] < 8
    assert calls["bucketed_1e7"] == 1 and calls["bucketed_8"] == 5  # 3x5 -> [5,5] [5,7] [1,33] [33] [4]


def test_default_workload_is_modest_and_measured_once():
    op = BucketedReduceScatter()
    assert 3e6 < sum(DEFAULT_GRADIENTS) < 8e6  # 12-32 MB of float32: the default sweep stays short
    assert len(op.points([8, 16, 32])) == 1
    assert op.variants == ("per_tensor", "bucketed_1MB", "bucketed_5MB", "bucketed_25MB", "bucketed_100MB", "flat")
    assert BucketedAllReduce().variants == ("per_tensor", "bucketed_256K", "bucketed_1M", "bucketed_1e7")


def test_variant_option_selects():
    offered = BucketedReduceScatter().variants
    assert choose_variants(offered, ["flat", "concat"]) == ("flat",)
    assert choose_variants(offered, ["concat"]) == offered  # none of its own: all


class CorruptedReduceScatter(BucketedReduceScatter):
    """Reduces correctly, then bumps the first element of the last gradient's shard."""

    def issue(self, args, phase):
        super().issue(args, phase)
        complete(args)
        args.output[-1][0] += 1


class CorruptedAllReduce(BucketedAllReduce):
    def issue(self, args, phase):
        super().issue(args, phase)
        complete(args)
        args.input[3][0] += 1


@pytest.mark.slow
def test_a_corrupted_result_is_caught():
    cases = every_variant(CorruptedReduceScatter, RS_OPTIONS, ("float32",), (1,)) + every_variant(
        CorruptedAllReduce, AR_OPTIONS, ("float32",), (1,)
    )
    results = run_ranks(run_cases, 2, cases)[0]
    assert [r["wrong"] for r in results] == [2] * len(cases)  # one element on each rank
