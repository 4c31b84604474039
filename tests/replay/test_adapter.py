"""The replay adapter: a recorded Call set up through commbench's own ops with its exact counts."""

from __future__ import annotations

import pytest

from commbench.replay.adapter import SitOut, Step, inexact, op_options, recorded_names, s_bytes, set_up, unsupported
from commbench.replay.record import Call
from tests.replay.plans import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, BROADCAST, REDUCE_SCATTER
from tests.support.fakes import FakeBackend


def test_s_follows_each_ops_definition_from_the_per_rank_input() -> None:
    assert s_bytes(ALL_REDUCE, 2, 4) == 1000 * 4
    assert s_bytes(ALL_GATHER, 2, 4) == 300 * 2 * 4  # S = gathered output = n x each rank's input
    assert s_bytes(ALL_GATHER, 8, 4) == 300 * 8 * 4  # on more ranks each rank still sends its 300
    assert s_bytes(REDUCE_SCATTER, 2, 2) == 600 * 2  # S = full input per rank
    scatter = Call("scatter", "flat", "float32", 200, 100, (0, 1), peer=0)
    assert s_bytes(scatter, 2, 4) == 100 * 2 * 4  # the root's buffer: n x what each rank receives
    assert s_bytes(Call("barrier", "barrier", "float32", 0, 0, (0, 1)), 2, 4) == 0


def test_roots_and_tensors_become_the_ops_options() -> None:
    assert op_options(BROADCAST) == {"root": 1}
    grouped = Call("grouped_all_gather", "coalesced", "float32", 10, 20, (0, 1), tensors=3)
    assert op_options(grouped) == {"tensors": (4, 3, 3)}
    assert op_options(ALL_REDUCE) == {}


def test_a_call_without_a_rule_or_a_root_is_named() -> None:
    assert "no replay rule for op 'sync_bn'" in unsupported(Call("sync_bn", "x", "float32", 1, 1, (0, 1)))
    assert "root" in unsupported(Call("reduce", "flat", "float32", 1, 1, (0, 1)))
    assert all(unsupported(c) is None for c in (ALL_REDUCE, ALL_GATHER, BROADCAST, ALL_TO_ALL))
    assert {op for op, _ in recorded_names().values()} == {
        "all_reduce", "broadcast", "reduce", "sendrecv", "all_to_all", "reduce_scatter_base", "all_gather",
        "gather", "grouped_all_gather", "scatter", "barrier",
    }  # fmt: skip


@pytest.mark.parametrize("rank", [0, 1])
def test_exact_counts_are_set_up(rank: int) -> None:
    backend = FakeBackend(rank, 2)
    gathered = set_up(ALL_GATHER, backend, backend, 2)
    assert gathered.args.input.numel() == 300 and gathered.args.output.numel() == 600
    scattered = set_up(REDUCE_SCATTER, backend, backend, 2)
    assert scattered.args.input.numel() == 600 and str(scattered.args.input.dtype) == "torch.bfloat16"
    routed = set_up(ALL_TO_ALL, backend, backend, 2)
    assert routed.args.state.send == list(ALL_TO_ALL.splits[rank])  # the recorded splits, not the seeded ones
    assert routed.args.state.receive == [row[rank] for row in ALL_TO_ALL.splits]
    assert routed.args.input.numel() == sum(ALL_TO_ALL.splits[rank])


def test_a_count_the_op_cannot_hold_exactly_is_refused_not_rounded() -> None:
    backend = FakeBackend(0, 2)
    odd = Call("reduce_scatter_base", "flat", "float32", 601, 300, (0, 1))
    with pytest.raises(ValueError, match="601 elements do not split evenly over its 2 ranks"):
        set_up(odd, backend, backend, 2)
    with pytest.raises(ValueError, match="no variant 'bucketed'"):
        set_up(Call("all_reduce", "bucketed", "float32", 4, 4, (0, 1)), backend, backend, 2)
    lopsided = Call("all_to_all", "uneven", "float32", 4, 4, (0, 1), splits=((1, 3),))
    with pytest.raises(ValueError, match="its splits are not 2 x 2"):
        set_up(lopsided, backend, backend, 2)


def test_a_rank_outside_the_group_sits_out_with_the_groups_s() -> None:
    world = FakeBackend(2, 4)
    issued = set_up(ALL_GATHER, None, world, 2)
    assert isinstance(issued.op, SitOut) and issued.s_bytes == 300 * 2 * 4
    issued.op.issue(issued.args, "comm")  # issues nothing: the fake's collectives would raise
    assert issued.op.wrong(issued.args, "comm") == 0


def test_the_step_issues_its_members_calls_in_order_and_shares_one_wait_list() -> None:
    backend = FakeBackend(0, 2)
    shared: list = []
    members = [set_up(c, backend, backend, 2, shared) for c in (ALL_REDUCE, BROADCAST)]
    outside = set_up(ALL_GATHER, None, backend, 2, shared)
    step = Step([*members, outside])
    assert [i.call for i in step.issued] == [ALL_REDUCE, BROADCAST]  # the sit-out is not issued
    assert all(i.args.wait_objs is shared for i in members)
    assert step.size_bytes(members[0].args, "comm") == 4000 + 308 + 2400  # every call's S, the sit-out's too


def test_inexact_counts_are_known_from_the_counts_alone() -> None:
    assert inexact(ALL_GATHER, 2) is None and inexact(ALL_TO_ALL, 2) is None
    assert inexact(Call("all_reduce", "flat", "float32", 0, 0, (0, 1)), 2) == "it moves no elements"
    assert (
        inexact(Call("all_to_all", "single", "float32", 9, 9, (0, 1)), 2)
        == "9 elements do not split evenly over its 2 ranks"
    )
    assert inexact(Call("barrier", "barrier", "float32", 0, 0, (0, 1)), 2) is None
