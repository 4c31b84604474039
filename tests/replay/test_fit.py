"""A Plan onto the launch's ranks: as recorded, refused when too small, or placed by --scale's rule."""

from __future__ import annotations

import pytest

from commbench.errors import UserError
from commbench.replay.fit import fit, placed, scaled
from commbench.replay.record import Call
from commbench.replay.summary import recorded_calls_us
from tests.replay.plans import fsdp_like, tensor_parallel


def test_a_large_enough_launch_runs_the_groups_as_recorded() -> None:
    plan = tensor_parallel()
    assert fit(plan, 4, False) == (plan, "groups as recorded on 4 of the 4 ranks")
    same, line = fit(plan, 6, False)
    assert same is plan and line.endswith("ranks 4-5 sit every call out")


def test_a_launch_too_small_is_refused_in_one_line_without_scale() -> None:
    with pytest.raises(UserError) as caught:
        fit(tensor_parallel(), 2, False)
    assert caught.value.format_message() == (
        "the trace's groups need 4 ranks and this launch has 2: launch 4 ranks (--nproc 4), "
        "or pass --scale to fit the groups onto 2"
    )


def test_the_scale_rule_keeps_sizes_where_they_fit() -> None:
    assert placed((2, 3), 2) == (0, 1)
    assert placed((0, 2), 2) == (0, 1)  # a strided pair stays a pair
    assert placed((1, 2, 3), 4) == (1, 2, 3)
    assert placed((3, 4, 5), 4) == (0, 1, 3)  # wraps
    assert placed(tuple(range(8)), 2) == (0, 1)  # capped at the launch


def test_scaling_merges_the_calls_it_makes_identical_with_their_counts_and_times() -> None:
    plan = tensor_parallel()
    scaled_plan, line = fit(plan, 2, True)
    assert line.startswith("--scale: a recorded group of k ranks starting at rank g runs on min(k, 2)")
    pair = Call("all_reduce", "flat", "float32", 512, 512, (0, 1))
    gather = Call("all_gather", "flat", "float32", 64, 256, (0, 1))
    assert scaled_plan.counts == ((pair, 3), (gather, 1))
    assert [c.group_ranks for c in scaled_plan.sequence] == [(0, 1)] * 4
    assert dict(scaled_plan.recorded_us)[pair] == (100.0, 101.0, 100.0)
    assert recorded_calls_us(scaled_plan) == recorded_calls_us(plan) == 401.0  # nothing recorded is lost


def test_scaled_all_to_all_splits_fold_the_traffic_of_the_ranks_folded_together() -> None:
    call = Call("all_to_all", "uneven", "float32", 6, 6, (0, 1, 2, 3), splits=((1, 2, 3, 0),) * 4)
    folded = scaled(call, 2)
    assert folded.group_ranks == (0, 1)
    assert folded.splits == ((8, 4), (8, 4))  # rank 0 carries recorded ranks 0 and 2, to 0+2 and 1+3
    root = scaled(Call("broadcast", "flat", "float32", 8, 8, (0, 1, 2, 3), peer=3), 2)
    assert root.peer == 1


def test_fsdp_plan_on_its_own_size_is_untouched() -> None:
    plan = fsdp_like()
    assert fit(plan, 2, True)[0] is plan
