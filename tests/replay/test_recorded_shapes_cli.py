"""Issue 45's job shapes replayed through the CLI: each recorded here from a real 2-rank Gloo job
(tests/support/recorded_jobs.py), replayed by `commbench replay` on 2 Gloo ranks, and what every
rank issued, captured inside it (tests/replay/capture), held against what the job itself issued on
that rank: op, variant, dtype, element counts, splits, group ranks, communicator, one-way transfers,
order, each recorded step's own calls, count per step, and 0 wrong. Never a time."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from commbench.cli import main
from tests.replay.captured import Replayed, replay
from tests.support.errors import assert_one_line_error
from tests.support.recorded_jobs import Issued, Recording, record

pytestmark = pytest.mark.slow
STEPS = 3
JOBS = ("moe", "one_rank_group", "two_groups", "pipeline", "pipeline_batched")


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> dict[str, Recording]:
    root = tmp_path_factory.mktemp("jobs")
    return {name: record(name, root / name, 2, STEPS) for name in JOBS}


@pytest.fixture(scope="module")
def replayed(jobs, tmp_path_factory):
    """replayed(name, fmt, rank=None): the CLI's replay of the job's traces, run once for the module."""
    root: Path = tmp_path_factory.mktemp("replays")
    done: dict[tuple[str, str, int | None], Replayed] = {}

    def get(name: str, fmt: str = "kineto", rank: int | None = None) -> Replayed:
        if (name, fmt, rank) not in done:
            files = getattr(jobs[name], fmt)(rank=rank)
            done[(name, fmt, rank)] = replay(files, root / f"{name}-{fmt}-{rank}")
        return done[(name, fmt, rank)]

    return get


class _Call:
    """A captured call (tests/replay/capture) by its fields' names, as Issued.matches reads them."""

    def __init__(self, c: list[Any]) -> None:
        self.op, self.variant, self.dtype, self.in_elems, self.out_elems = c[:5]
        self.group_ranks = tuple(c[5])
        self.splits = tuple(tuple(row) for row in c[6])
        self.src, self.dst, self.communicator = c[7], c[8], c[9]


def _steps(captured: dict[str, Any]) -> list[list[_Call]]:
    return [[_Call(c) for c in step["calls"]] for step in captured["steps"]]


def _assert_issued(got: list[_Call], want: list[Issued]) -> None:
    assert len(got) == len(want), (got, want)
    for call, issued in zip(got, want):
        assert issued.matches(call), (vars(call), issued)


def _pattern(labels: list[Any]) -> list[int]:
    seen: dict[Any, int] = {}
    return [seen.setdefault(label, len(seen)) for label in labels]


def _all_ok(rows: list[dict[str, str]]) -> None:
    calls = [r for r in rows if r["kind"] in ("call", "step")]
    assert calls and all(r["status"] == "ok" and r["wrong"] == "0" for r in calls), calls


def test_moe_issues_each_steps_own_split_matrix_in_rows_times_the_row_width(jobs, replayed):
    """A call holds the lowest rank's counts; each rank sends its own row of the matrix and receives
    its column, as torch's c10d::alltoall_base_ on that rank shows (output, input)."""
    rec, done = jobs["moe"], replayed("moe")
    for rank, captured in enumerate(done.ranks):
        steps = _steps(captured)
        assert len(steps) == STEPS, f"rank {rank}"
        for got, want, seen in zip(steps, rec.issued[rank], captured["steps"]):
            assert [(c.op, c.variant, c.dtype, c.group_ranks, c.splits) for c in got] == [
                (i.op, i.variant, i.dtype, i.group_ranks, i.splits)
                for i in want  # elements: rows x 16
            ], f"rank {rank}"
            assert [(e[0], e[1]) for e in seen["comms"]] == [
                ("c10d::alltoall_base_", [[i.out_elems], [i.in_elems]]) for i in want
            ], f"rank {rank}"
    assert "each step is replayed as recorded" in done.stdout
    _all_ok(done.rows)


def test_a_one_rank_groups_collectives_issue_nothing_and_are_listed(jobs, replayed):
    rec, done = jobs["one_rank_group"], replayed("one_rank_group")
    for rank, captured in enumerate(done.ranks):
        (step,) = _steps(captured)
        _assert_issued(step, [i for i in rec.steady(rank) if len(i.group_ranks) > 1])
        assert [e[0] for e in captured["comms"]] == ["c10d::allreduce_"]  # the world's all_reduce alone
    unmapped = [r for r in done.rows if r["kind"] == "unmapped"]
    assert sum("a group of one rank" in r["note"] for r in unmapped) == 2 * 2 * STEPS  # 2 calls, 2 ranks, 3 steps
    _all_ok(done.rows)


@pytest.mark.parametrize("fmt", ["kineto", "flight_recorder"])
def test_two_groups_over_the_same_ranks_run_on_two_communicators(jobs, replayed, fmt):
    rec, done = jobs["two_groups"], replayed("two_groups", fmt)
    for rank, captured in enumerate(done.ranks):
        (step,) = _steps(captured)
        steady = rec.steady(rank)
        _assert_issued(step, steady)
        assert _pattern([c.communicator for c in step]) == _pattern([i.group for i in steady]), f"rank {rank}"
        assert "world" not in {c.communicator for c in step}  # neither is the default group
    counts = Counter((r["op"], int(r["in_elems"]), int(r["count_per_step"])) for r in done.rows if r["kind"] == "call")
    assert counts == Counter((i.op, i.in_elems, 1) for i in rec.steady())
    _all_ok(done.rows)


def _transfers(issued: list[Issued], rank: int) -> list[tuple[int, int, str, int]]:
    """A rank's sends and recvs as the one-way transfers (src, dst, dtype, elements) they are."""
    return [
        (rank, i.peer, i.dtype, i.in_elems) if i.op == "send" else (i.peer, rank, i.dtype, i.in_elems) for i in issued
    ]


@pytest.mark.parametrize(
    "name, rank",
    [("pipeline", None), ("pipeline_batched", None), ("pipeline", 0)],
    ids=["every rank", "batched", "rank 0"],
)
def test_pipeline_sends_and_recvs_are_one_way_transfers(jobs, replayed, name, rank):
    """Every rank's trace, or rank 0's alone: rank 0's send and rank 1's recv are one transfer, issued
    one way (c10d::send on the sender, c10d::recv_ on the receiver), never a two-way exchange."""
    rec, done = jobs[name], replayed(name, "kineto", rank)
    for r, captured in enumerate(done.ranks):
        (step,) = _steps(captured)
        want = _transfers(rec.steady(r), r)
        assert [(c.src, c.dst, c.dtype, c.in_elems) for c in step] == want, f"rank {r}"
        assert all(c.op == "sendrecv" and c.variant == "oneway" for c in step)
        sides = ["c10d::send" if src == r else "c10d::recv_" for src, *_ in want]
        assert [e[0] for e in captured["comms"]] == sides, f"rank {r}"
    calls = [r for r in done.rows if r["kind"] == "call"]
    assert Counter({r["phase"]: int(r["count_per_step"]) for r in calls}) == Counter({"comm 0->1": 2, "comm 1->0": 2})
    _all_ok(done.rows)


def test_a_plan_with_nothing_to_replay_is_one_line_and_exit_2(jobs):
    """Gloo's Flight Recorder dump of the MoE job holds no splits: nothing replays, said in one line."""
    result = CliRunner().invoke(main, ["replay", *jobs["moe"].flight_recorder(), "--nproc", "2", "--no-history"])
    assert_one_line_error(
        result, "none of its 9 collective(s) can be replayed (its splits are not recorded", exit_code=2
    )


def test_a_launch_larger_than_the_job_is_refused_in_one_line_without_scale(jobs):
    args = ["replay", *jobs["two_groups"].kineto(), "--nproc", "3", "--backend", "gloo", "--no-history"]
    assert_one_line_error(
        CliRunner().invoke(main, args), "the trace's job ran on 2 ranks and this launch has 3", exit_code=2
    )


def test_a_gloo_pipeline_dump_replays_what_it_holds_and_says_what_it_lacks(jobs, replayed):
    """Gloo's Flight Recorder holds none of the pipeline's 16 send/recv, only the final barrier: that
    barrier is replayed (a plan that moves no bytes), and the output says the transfers are missing."""
    done = replayed("pipeline", "flight_recorder")
    for captured in done.ranks:
        assert [c.op for c in _steps(captured)[0]] == ["barrier"]
    assert "Gloo records no send/recv in a Flight Recorder dump: 16 on group '0'" in done.stdout
    _all_ok(done.rows)
