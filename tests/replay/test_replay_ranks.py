"""The replay on real Gloo groups: the step's sequence is issued exactly as the plan says it (op,
element counts, dtype, group, order), seen through torch.profiler's record of the c10d calls."""

from __future__ import annotations

import pytest

from commbench.replay.codec import plan_to_dict
from tests.replay.plans import fsdp_like, tensor_parallel
from tests.replay.ranks import issued_under_profiler
from tests.support.distributed import run_ranks

pytestmark = pytest.mark.slow


def test_the_step_issues_the_recorded_sequence_exactly() -> None:
    # fsdp_like: broadcast 77 from rank 1, all_gather 300 -> 600 twice, reduce_scatter 600 -> 300 in
    # bfloat16, all_to_all with splits ((10, 30), (30, 20)), all_reduce 1000; every call on both ranks.
    gather = ("c10d::_allgather_base_", ((600,), (300,)), "float", ())
    expected = {
        rank: [
            ("c10d::broadcast_", (((77,),),), None, ()),
            gather,
            gather,
            ("c10d::_reduce_scatter_base_", ((300,), (600,)), "c10::BFloat16", ()),
            # what this rank receives (its column of the splits) and sends (its row), and both splits
            ("c10d::alltoall_base_", ((received,), (sent,)), "float", (column, row)),
            ("c10d::allreduce_", (((1000,),),), None, ()),
        ]
        for rank, received, sent, column, row in (
            (0, 40, 40, "[10, 30]", "[10, 30]"),
            (1, 50, 50, "[30, 20]", "[30, 20]"),
        )
    }
    for rank, result in enumerate(run_ranks(issued_under_profiler, 2, plan_to_dict(fsdp_like()))):
        assert result["comms"] == expected[rank], f"rank {rank}"
        assert result["wrong"] == 0  # and each call's own check passes on the replayed buffers


def test_groups_are_issued_on_their_own_ranks_only() -> None:
    # tensor_parallel: all_reduce 512 on (0, 1), all_reduce 512 on (2, 3), all_gather 64 -> 256 on all
    # four, all_reduce 512 on (0, 1) again.
    pair = ("c10d::allreduce_", (((512,),),), None, ())
    gather = ("c10d::_allgather_base_", ((256,), (64,)), "float", ())
    results = run_ranks(issued_under_profiler, 4, plan_to_dict(tensor_parallel()))
    for rank, result in enumerate(results):
        assert result["comms"] == ([pair, gather, pair] if rank < 2 else [pair, gather]), f"rank {rank}"
        assert result["wrong"] == 0
