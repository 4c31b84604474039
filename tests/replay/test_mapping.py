"""The mapping onto commbench's ops and variants, the alignment of several ranks, and the reasons a
recorded collective is not replayed, with their share of the recorded time."""

from __future__ import annotations

import pytest

from commbench.errors import UserError
from commbench.ops import registry
from commbench.replay.adapter import recorded_names
from commbench.replay.mapping import OUTSIDE_STEPS, plan, unmapped_shares
from commbench.replay.record import Collective, Trace


def _c(name: str, n: int = 8, rank: int = 0, **kw) -> Collective:
    base = {
        "dtype": "float32",
        "in_elems": n,
        "out_elems": n,
        "group": "0",
        "group_ranks": (0, 1),
        "rank": rank,
        "step": 1,
    }
    return Collective(name=name, **{**base, **kw})


def _trace(rank: int, *cs: Collective, steps: tuple[int, ...] = (1,)) -> Trace:
    return Trace(
        path=f"r{rank}", format="kineto", rank=rank, world_size=2, digest=str(rank), collectives=cs, steps=steps
    )


def test_every_mapped_op_and_variant_is_one_commbench_offers():
    ops = registry()
    for name, (op, variant) in recorded_names().items():
        assert op in ops, name
        assert variant in ops[op].spec.variants, (name, op, variant)


def test_each_recorded_kind_goes_to_its_op_and_variant():
    cs = [
        _c("allreduce"),
        _c("_allgather_base", 4, out_elems=8),
        _c("allgather", 4, out_elems=8),
        _c("_reduce_scatter_base", 8, out_elems=4),
        _c("reduce_scatter", 8, out_elems=4),
        _c("alltoall_base", in_splits=(4, 4), out_splits=(4, 4)),
        _c("alltoall"),
        _c("broadcast", peer=1),
        _c("reduce", peer=0),
        _c("gather", 4, out_elems=8, peer=0),
        _c("scatter", 8, out_elems=4, peer=0),
        _c("send", peer=1),
        _c("barrier", 0),
        _c("allgather_into_tensor_coalesced", 12, out_elems=24, coalesced=3),
    ]
    p = plan([_trace(0, *cs)])
    assert [(c.op, c.variant) for c in p.sequence] == [
        ("all_reduce", "flat"),
        ("all_gather", "flat"),
        ("all_gather", "list"),
        ("reduce_scatter_base", "flat"),
        ("reduce_scatter_base", "list"),
        ("all_to_all", "single"),
        ("all_to_all", "list"),
        ("broadcast", "flat"),
        ("reduce", "flat"),
        ("gather", "flat"),
        ("scatter", "flat"),
        ("sendrecv", "pair"),
        ("barrier", "barrier"),
        ("grouped_all_gather", "coalesced"),
    ]
    assert p.sequence[7].peer == 1 and p.sequence[-1].tensors == 3
    assert p.unmapped == ()


def test_uneven_all_to_all_takes_every_ranks_splits_and_is_unmapped_from_one_rank_alone():
    r0 = _c("alltoall_base", 6, out_elems=5, in_splits=(4, 2), out_splits=(4, 1), seq=1)
    r1 = _c("alltoall_base", 4, out_elems=5, rank=1, in_splits=(1, 3), out_splits=(2, 3), seq=1)
    p = plan([_trace(0, r0), _trace(1, r1)])
    (call,) = p.sequence
    assert (call.variant, call.splits) == ("uneven", ((4, 2), (1, 3)))
    assert any("aligned per process group by Seq" in n for n in p.notes)
    alone = plan([_trace(0, r0)])
    assert alone.sequence == () and "other ranks' splits" in alone.unmapped[0].reason


def test_ranks_that_disagree_or_miss_a_collective_leave_it_unmapped():
    p = plan([_trace(0, _c("allreduce"), _c("broadcast", peer=0)), _trace(1, _c("allreduce", rank=1))])
    assert [c.op for c in p.sequence] == ["all_reduce"]
    assert p.unmapped[0].reason == "not recorded on rank 1 (the ranks' traces disagree)"


def test_what_cannot_be_replayed_is_listed_with_its_share_of_the_recorded_time():
    p = plan(
        [
            _trace(
                0,
                _c("allreduce", recorded_us=30.0),
                _c("allreduce", recorded_us=10.0, step=None),
                _c("nccl_custom_thing", recorded_us=60.0),
            )
        ]
    )
    assert [u.reason for u in p.unmapped] == [OUTSIDE_STEPS, "'nccl_custom_thing' is no collective commbench issues"]
    assert unmapped_shares(p) == [
        (OUTSIDE_STEPS, 1, 0.1),
        ("'nccl_custom_thing' is no collective commbench issues", 1, 0.6),
    ]


def test_lossy_inputs_are_named_in_the_notes():
    p = plan([_trace(0, _c("broadcast"), _c("allreduce", lossy=("splits cut at 30 entries",)))])
    assert "root not recorded: rank 0 of the group assumed (1 collectives)" in p.notes
    assert "splits cut at 30 entries (1 collectives)" in p.notes
    assert any("sum assumed" in n for n in p.notes)


def test_the_sequence_most_steps_issue_is_replayed_and_the_others_named():
    cs = [_c("allreduce", step=1), _c("broadcast", peer=0, step=1)] + [_c("allreduce", step=s) for s in (2, 3)]
    p = plan([_trace(0, *cs, steps=(1, 2, 3))])
    assert [c.op for c in p.sequence] == ["all_reduce"] and p.steps == 2
    assert any("step(s) 1 issue another sequence" in n for n in p.notes)


def test_a_dtype_the_ops_cannot_carry_is_listed_not_replayed():
    p = plan([_trace(0, _c("allreduce", dtype="int16"), _c("allreduce", dtype="bool"), _c("allreduce"))])
    assert [c.dtype for c in p.sequence] == ["float32"]
    assert sorted(u.collective.dtype for u in p.unmapped) == ["bool", "int16"]
    assert all("commbench's ops carry float32" in u.reason for u in p.unmapped)


def test_a_collective_whose_counts_or_group_differ_on_another_rank_is_unmapped_with_its_reason():
    common = [_c("allreduce", 64, seq=i) for i in range(1, 4)]
    mine = [*common, _c("broadcast", 8, peer=0, seq=4), _c("allreduce", 16, seq=5)]
    theirs = [
        *(_c("allreduce", 64, rank=1, seq=i) for i in range(1, 4)),
        _c("broadcast", 32, peer=0, rank=1, seq=4),
        _c("allreduce", 16, rank=1, seq=5, group_ranks=(1, 2)),
    ]
    p = plan([_trace(0, *mine), _trace(1, *theirs)])
    assert [c.op for c in p.sequence] == ["all_reduce"] * 3
    assert [u.reason for u in p.unmapped] == [
        "rank 1 issued it with 32 elements, not 8 (the ranks' traces disagree)",
        "rank 1 issued it on another group (the ranks' traces disagree)",
    ]


def test_ranks_whose_traces_disagree_on_most_collectives_are_two_jobs_refused_whole():
    r0 = [_c("allreduce", n, seq=i) for i, n in enumerate((64, 128, 256))]
    r1 = [_c("allreduce", 4 * n, rank=1, seq=i) for i, n in enumerate((64, 128, 256))]
    with pytest.raises(UserError, match=r"r0 and r1 disagree on 3 of their 3 common collectives .*two different jobs"):
        plan([_trace(0, *r0), _trace(1, *r1)])
    uneven = [_c("alltoall_base", 6, in_splits=(4, 2), out_splits=(4, 1), seq=1)]
    other = [_c("alltoall_base", 4, rank=1, in_splits=(1, 3), out_splits=(2, 3), seq=1)]
    assert plan([_trace(0, *uneven), _trace(1, *other)]).unmapped == ()  # an all_to_all's counts differ by rank
