"""The ranks' records matched into the job's calls (commbench/replay/align.py): a send and its
peer's recv one transfer, a one-rank group's collectives listed, the ranks' orders merged."""

from __future__ import annotations

from commbench.replay.align import merged
from commbench.replay.mapping import plan
from commbench.replay.record import Collective, Trace


def _c(name: str, rank: int, n: int = 8, **kw) -> Collective:
    base = {"dtype": "float32", "in_elems": n, "out_elems": n, "group": "0", "group_ranks": (0, 1), "step": 1}
    return Collective(name=name, rank=rank, **{**base, **kw})


def _trace(rank: int, *cs: Collective) -> Trace:
    return Trace(
        path=f"r{rank}", format="kineto", rank=rank, world_size=2, digest=str(rank), collectives=cs, steps=(1,)
    )


def test_a_send_and_its_peers_recv_are_one_one_way_transfer_in_the_order_both_ranks_issue():
    rank0 = _trace(0, _c("send", 0, peer=1), _c("send", 0, 4, peer=1), _c("recv", 0, 2, peer=1))
    rank1 = _trace(1, _c("recv", 1, peer=0), _c("recv", 1, 4, peer=0), _c("send", 1, 2, peer=0))
    p = plan([rank0, rank1])
    assert [(c.op, c.variant, c.src, c.dst, c.in_elems) for c in p.sequence] == [
        ("sendrecv", "oneway", 0, 1, 8),
        ("sendrecv", "oneway", 0, 1, 4),
        ("sendrecv", "oneway", 1, 0, 2),
    ]
    assert p.unmapped == ()


def test_a_recv_of_another_count_than_its_send_is_listed():
    p = plan([_trace(0, _c("send", 0, peer=1)), _trace(1, _c("recv", 1, 4, peer=0))])
    assert p.sequence == () and "rank 1 received 4 float32 elements, not 8" in p.unmapped[0].reason


def test_a_collective_on_a_group_of_one_rank_is_listed_with_that_reason():
    solo = _c("allreduce", 0, group="1", group_ranks=(0,))
    p = plan([_trace(0, solo, _c("allreduce", 0, 100)), _trace(1, _c("allreduce", 1, 100))])
    assert [c.in_elems for c in p.sequence] == [100]
    assert [u.reason for u in p.unmapped] == ["a group of one rank (rank 0): it issues no communication"]


def test_an_all_gather_whose_output_is_its_input_is_on_a_group_of_one_rank_whatever_its_trace_says():
    gather = _c(
        "_allgather_base", 0, 32, lossy=("process group not recorded by the dispatcher op (the default group assumed)",)
    )
    p = plan([_trace(0, gather)])
    assert p.sequence == () and "a group of one rank" in p.unmapped[0].reason
    assert any(n.startswith("rank 0's trace names no process group") for n in p.notes)


def test_the_ranks_orders_merge_keeping_each_ranks_own_order():
    assert merged([[1, 2, 3], [1, 3]]) == [1, 2, 3]
    assert merged([[1, 3], [2, 3]]) == [1, 2, 3]
    assert merged([[1, 2], [2, 1]]) == [1, 2]  # crossed: the lowest rank's order goes first
