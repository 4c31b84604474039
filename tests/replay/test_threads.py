"""Gloo's process groups in a Kineto trace told by the run-loop threads their work ran on
(commbench/replay/readers/threads.py)."""

from __future__ import annotations

from commbench.replay.readers.threads import Group, placements

DEFAULT, DP, TP = Group("0", "default_pg", (0, 1)), Group("1", "undefined", (0, 1)), Group("2", "undefined", (0, 1))


def test_every_listed_groups_two_threads_seen_name_each_group_in_creation_order():
    told = placements([DEFAULT, Group("1", "undefined", (0,))], [16076, 16073, 16077, 16074, 16073], caller=16069)
    assert told is not None
    assert {t: p.group.name for t, p in told.items()} == {16073: "0", 16074: "0", 16076: "1", 16077: "1"}


def test_groups_whose_threads_are_not_all_seen_are_told_apart_by_order_where_their_ranks_agree():
    told = placements([DEFAULT, DP, TP], [16003, 15999, 16002, 15998], caller=15900)
    assert told is not None
    assert {t: p.group.name for t, p in told.items()} == {
        15998: "threads#0",
        15999: "threads#0",
        16002: "threads#1",
        16003: "threads#1",
    }
    assert all(p.group.ranks == (0, 1) for p in told.values())


def test_nothing_is_told_where_it_would_be_a_guess():
    assert placements([DEFAULT], [1, 2], caller=0) is None  # one group: nothing to tell
    assert placements([DEFAULT, DP], [1, 2, 3], caller=0) is None  # an odd count of threads
    assert placements([DEFAULT, DP, Group("2", "", (0,))], [1, 2], caller=0) is None  # other ranks
    assert placements([DEFAULT, DP], [0, 0], caller=0) is None  # the caller's own thread: p2p
