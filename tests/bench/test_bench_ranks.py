"""bench/ranks.py: a bench script's ranks never hang it. A rank that crashes, or ranks that end
without a result, stop every rank and raise one line; results arrive as rank 0 sends them."""

from __future__ import annotations

import os
import sys
import time

import pytest

from tests.support.distributed import REPO

sys.path.insert(0, str(REPO / "bench"))
from ranks import RanksFailed, run_ranks, stream_ranks


def crash_one(rank: int, world: int, port: int, queue, code: int) -> None:
    if rank == 1:
        os._exit(code)
    time.sleep(300)  # rank 0 would wait for its peer forever


def send_nothing(rank: int, world: int, port: int, queue) -> None:
    return None


def send_three(rank: int, world: int, port: int, queue) -> None:
    if rank == 0:
        for i in range(3):
            queue.put(i)


@pytest.mark.slow
def test_a_crashed_rank_stops_the_others_and_says_which():
    began = time.monotonic()
    with pytest.raises(RanksFailed, match="rank 1 exited with code 3 before sending a result"):
        run_ranks(crash_one, 2, 3, timeout_s=120)
    assert time.monotonic() - began < 100


@pytest.mark.slow
def test_ranks_that_end_without_a_result_do_not_hang_the_script():
    with pytest.raises(RanksFailed, match="every rank exited without sending its result"):
        run_ranks(send_nothing, 2, timeout_s=120)


@pytest.mark.slow
def test_results_stream_in_the_order_rank_0_sends_them():
    assert list(stream_ranks(send_three, 2, items=3, timeout_s=120)) == [0, 1, 2]
