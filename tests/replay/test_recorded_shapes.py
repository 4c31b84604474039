"""Issue 45's job shapes, recorded here from real Gloo jobs (tests/support/recorded_jobs.py), and
the plan each format's traces give held against what the job itself issued: op, element counts
(an all_to_all's splits in rows times the row width), dtype, group, order, count per step, one-way
point-to-point transfers, a Flight Recorder dump cut into its iterations. Never a time.

Where today's replay gets a shape wrong the test says so: `xfail(strict=True)` with the reason, so
the suite stays green and the fix flips exactly these. Three helpers below read what the Plan does
not hold yet (a call's communicator, one-way transfers, per-step sequences); each names the
attribute it expects, so a fix that spells it otherwise edits that helper alone.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from commbench.errors import UserError
from commbench.replay.load import load
from commbench.replay.mapping import plan
from commbench.replay.record import Plan
from commbench.replay.spans import step_wall_us
from tests.support.recorded_jobs import HIDDEN, Issued, Recording, record

pytestmark = pytest.mark.slow
STEPS = 3
FORMATS = ("kineto", "execution_traces", "flight_recorder")
TRACES = ("kineto", "execution_traces")


def _xfail(why: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, reason=f"issue 45: {why}")


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Callable[..., Recording]:
    """job(name, world_size=2): the job recorded once for the module, on first use."""
    root: Path = tmp_path_factory.mktemp("shapes")
    made: dict[tuple[str, int], Recording] = {}

    def get(name: str, world_size: int = 2) -> Recording:
        if (name, world_size) not in made:
            made[(name, world_size)] = record(name, root / f"{name}-{world_size}", world_size, STEPS)
        return made[(name, world_size)]

    return get


def _files(rec: Recording, fmt: str) -> list[str]:
    return getattr(rec, fmt)()


def _group_of(call: Any) -> Any:
    """The communicator a call is issued on, beyond its ranks: expected as Call.group (None today)."""
    return getattr(call, "group", None)


def _transfers(p: Plan) -> list[tuple[Any, Any, str, int]]:
    """The plan's point-to-point calls as one-way transfers (src, dst, dtype, elements): expected as
    a sendrecv Call with `src` and `dst` (global ranks) that is not the two-way "pair" exchange."""
    calls = [c for c in p.sequence if c.op == "sendrecv"]
    ends = [(None, None) if c.variant == "pair" else (getattr(c, "src", None), getattr(c, "dst", None)) for c in calls]
    return [(*end, c.dtype, c.in_elems) for end, c in zip(ends, calls)]


def _replayed_steps(p: Plan) -> tuple[tuple[Any, ...], ...]:
    """Each profiled step's sequence as the plan replays it: expected as Plan.step_sequences where
    the steps differ; today the plan holds one step's sequence (the one most steps issue)."""
    return tuple(getattr(p, "step_sequences", None) or (p.sequence,))


def _pattern(labels: list[Any]) -> list[int]:
    """Labels as first-seen indices: ["tp", "tp", "dp"] and [7, 7, 3] are both [0, 0, 1]."""
    seen: dict[Any, int] = {}
    return [seen.setdefault(label, len(seen)) for label in labels]


def _assert_sequence(p: Plan, issued: list[Issued]) -> None:
    assert len(p.sequence) == len(issued), (p.sequence, issued)
    for call, want in zip(p.sequence, issued):
        assert want.matches(call), (call, want)


def _one_way(rec: Recording) -> list[list[tuple[int, int, str, int]]]:
    """Each profiled step's transfers (src, dst, dtype, elements) as rank 0 issued them, in order."""
    return [
        [(0, i.peer, i.dtype, i.in_elems) if i.op == "send" else (i.peer, 0, i.dtype, i.in_elems) for i in step]
        for step in rec.issued[0]
    ]


# -- the ground truth itself -------------------------------------------------------------------


def test_the_recorded_jobs_issue_the_shapes_the_issue_names(job):
    moe = job("moe")
    matrices = {i.rows for step in moe.issued[0] for i in step}
    assert len(matrices) == STEPS * 2  # dispatch and combine, drawn anew each step
    for step in moe.issued[0]:
        for i in step:
            assert i.splits == tuple(tuple(n * HIDDEN for n in row) for row in i.rows) and i.row_width == HIDDEN
            assert sum(i.splits[0]) == i.in_elems  # rank 0's row, in elements
    solo = job("one_rank_group")
    assert {(i.group, i.group_ranks) for i in solo.steady(1)} == {("solo1", (1,)), ("world", (0, 1))}
    two = job("two_groups")
    assert [(i.group, i.group_ranks) for i in two.steady()] == [("tp", (0, 1))] * 2 + [("dp", (0, 1))] * 2
    for name, via in (("pipeline", {"send", "recv"}), ("pipeline_batched", {"batch_isend_irecv"})):
        rec = job(name)
        assert _one_way(rec)[0] == [(0, 1, "float32", 128)] * 2 + [(1, 0, "float32", 128)] * 2
        assert {i.variant for i in rec.steady()} == via
    ddp = job("ddp")
    assert [i.op for i in ddp.after[0]] == ["barrier"]
    assert pickle.loads(Path(ddp.flight_recorder(0)[0]).read_bytes())["entries"]  # the Flight Recorder recorded


# -- MoE: an uneven all_to_all_single of [tokens, HIDDEN] rows, new splits each step -------------


@_xfail("the c10d::alltoall_base_ splits are rows of the [tokens, 16] tensor, replayed as element counts")
@pytest.mark.parametrize("fmt", TRACES)
def test_moe_splits_are_rows_times_the_row_width(job, fmt):
    rec = job("moe")
    p = plan(load(_files(rec, fmt)))
    assert p.sequence and all(c.op == "all_to_all" and c.variant == "uneven" for c in p.sequence)
    for call in p.sequence:
        assert sum(call.splits[0]) == call.in_elems  # rank 0's row adds up to what rank 0 sends
    assert any(len(step) == len(p.sequence) and all(map(Issued.matches, step, p.sequence)) for step in rec.issued[0])


@_xfail("splits that change every step are reduced to one step's (the last); the others are not replayed")
@pytest.mark.parametrize("fmt", TRACES)
def test_moe_replays_every_steps_own_split_matrix(job, fmt):
    rec = job("moe")
    want = [[(i.op, i.variant, i.dtype, i.in_elems, i.out_elems, i.splits) for i in step] for step in rec.issued[0]]
    got = [
        [(c.op, c.variant, c.dtype, c.in_elems, c.out_elems, c.splits) for c in seq]
        for seq in _replayed_steps(plan(load(_files(rec, fmt))))
    ]
    assert got == want


@_xfail("a Flight Recorder dump records no splits: Gloo's MoE dump is replayed as an even all_to_all, unsaid")
def test_moe_from_a_flight_recorder_dump_is_never_replayed_as_even(job):
    p = plan(load(job("moe").flight_recorder()))
    assert not any(c.op == "all_to_all" and c.variant == "single" for c in p.sequence)
    assert any("split" in u.reason for u in p.unmapped) or any("split" in n for n in p.notes)


# -- a collective on a group of one rank issues nothing ------------------------------------------


@_xfail("Gloo's c10d ops name no group: the one-rank group's collectives are replayed on both ranks")
@pytest.mark.parametrize("fmt", FORMATS)
def test_one_rank_groups_issue_nothing_and_are_listed(job, fmt):
    rec = job("one_rank_group")
    p = plan(load(_files(rec, fmt)))
    _assert_sequence(p, [i for i in rec.steady() if len(i.group_ranks) > 1])
    assert sum("one rank" in u.reason for u in p.unmapped) >= 2 * (STEPS - 1), p.unmapped


# -- two groups over the same ranks are two communicators ----------------------------------------


@_xfail("Gloo's c10d ops name no group and a Call holds no communicator: dp and tp both replayed on the default group")
@pytest.mark.parametrize("fmt", FORMATS)
def test_two_groups_over_the_same_ranks_stay_two_communicators(job, fmt):
    rec = job("two_groups")
    steady = rec.steady()
    p = plan(load(_files(rec, fmt)))
    _assert_sequence(p, steady)
    assert None not in [_group_of(c) for c in p.sequence]
    assert _pattern([_group_of(c) for c in p.sequence]) == _pattern([i.group for i in steady])


# -- pipeline send/recv: one-way transfers, paired across ranks ----------------------------------


@_xfail("every rank's trace given: a send on rank 0 against its recv on rank 1 is rejected as 'the traces disagree'")
@pytest.mark.parametrize("name", ["pipeline", "pipeline_batched"])
@pytest.mark.parametrize("fmt", TRACES)
def test_every_ranks_pipeline_trace_pairs_each_send_with_its_recv(job, name, fmt):
    rec = job(name)
    p = plan(load(_files(rec, fmt)))
    assert _transfers(p) == _one_way(rec)[-1]
    assert p.unmapped == () or all("outside the profiler steps" in u.reason for u in p.unmapped)


@_xfail("from rank 0's trace alone each send/recv is replayed as a two-way pair exchange: twice the bytes")
@pytest.mark.parametrize("name", ["pipeline", "pipeline_batched"])
def test_one_ranks_pipeline_trace_replays_one_way(job, name):
    rec = job(name)
    p = plan(load(rec.kineto(rank=0)))
    assert _transfers(p) == _one_way(rec)[-1]


@pytest.mark.parametrize("form", ["pkl", "json"])
def test_a_gloo_pipeline_dump_says_it_holds_no_point_to_point(job, form):
    """Lossy where the format is: Gloo records no send/recv in its dump (the job's 16 are in no entry);
    the op_id of the one entry it holds, the final barrier, counts them, and the dump says how many."""
    rec = job("pipeline")
    p = plan(load(rec.flight_recorder(form=form)))
    sent = sum(len(step) for step in rec.warmup[0] + rec.issued[0])
    assert sent == 16
    assert f"Gloo records no send/recv in a Flight Recorder dump: {sent} on group '0'" in " ".join(p.notes), p.notes
    assert [c.op for c in p.sequence] == ["barrier"]  # what the dump holds, said to be all of it
    assert any("no iterations found" in n for n in p.notes)


# -- a Flight Recorder dump is the whole ring buffer: its iterations cut out --------------------


@pytest.mark.parametrize("name", ["ddp", "exposed", "two_groups", "one_rank_group"])
@pytest.mark.parametrize("form", ["pkl", "json"])
def test_a_flight_recorder_dump_is_cut_into_its_iterations(job, name, form):
    rec = job(name)
    traces = load(rec.flight_recorder(form=form))
    cut = [n for n in traces[0].notes if n.startswith("a Flight Recorder dump: ")]
    assert len(cut) == 1 and "left out" in cut[0] and cut[0].endswith("(the final barrier)"), traces[0].notes
    steps = {c.step for c in traces[0].collectives if c.step is not None}
    assert len(steps) >= STEPS and traces[0].steps == tuple(sorted(steps))
    for step in steps:  # every iteration found is one of the job's (the warm-up's, or a profiled one's)
        calls = [c for c in traces[0].collectives if c.step == step]
        job_steps = [s for s in rec.warmup[0] + rec.issued[0] if len(s) == len(calls)]
        assert any(
            [(i.in_elems, i.out_elems) for i in s] == [(c.in_elems, c.out_elems) for c in calls] for s in job_steps
        )
    barrier = traces[0].collectives[-1]
    assert barrier.name == "barrier" and barrier.step is None  # the job's end, outside the iterations
    if name in ("ddp", "exposed"):
        p = plan(traces)
        _assert_sequence(p, rec.steady())
        assert p.steps >= STEPS - 1


@pytest.mark.parametrize("form", ["pkl", "json"])
def test_a_flight_recorder_dump_of_fsdp_keeps_its_reduce_scatters_where_its_stacks_tell(job, form):
    """Gloo records FSDP's reduce_scatter_tensor as gloo:all_reduce of the whole input. A pickled dump's
    stacks run through reduce_scatter_single: recovered. A JSON dump has no stacks: the loss is said."""
    rec = job("fsdp")
    p = plan(load(rec.flight_recorder(form=form)))
    if form == "pkl":
        _assert_sequence(p, rec.steady())
        return
    assert [(c.op, c.in_elems) for c in p.sequence] == [
        ("all_reduce" if i.op == "reduce_scatter_base" else i.op, i.in_elems) for i in rec.steady()
    ]
    assert any("a JSON dump keeps no stacks" in n for n in p.notes), p.notes


# -- what is right today, and must stay so ------------------------------------------------------


@pytest.mark.parametrize("fmt", TRACES)
def test_an_all_reduce_waited_at_once_replays_exactly(job, fmt):
    rec = job("exposed")
    p = plan(load(_files(rec, fmt)))
    _assert_sequence(p, rec.steady())
    assert p.steps == STEPS


@pytest.mark.parametrize("world", [3, 4])
def test_ddp_recorded_on_more_ranks_replays_there_exactly(job, world):
    rec = job("ddp", world)
    p = plan(load(rec.kineto()))
    assert p.world_size == world
    _assert_sequence(p, rec.steady())
    assert all(c.group_ranks == tuple(range(world)) for c in p.sequence)


# -- a Flight Recorder dump's groups: their members from the dumps that hold them ----------------


@pytest.mark.parametrize("form", ["pkl", "json"])
def test_a_gloo_dumps_groups_get_their_members_from_every_ranks_dump(job, form):
    """Gloo's pg_config lists no group's ranks once a job makes a second group: each group's members are
    the ranks whose dumps hold its entries (the one-rank groups: one rank each; dp and tp: both)."""
    for name in ("one_rank_group", "two_groups"):
        rec = job(name)
        traces = load(rec.flight_recorder(form=form))
        assert all(t.world_size == 2 for t in traces)
        for t in traces:
            steady = rec.steady(t.rank)
            calls = [c for c in t.collectives if c.step == t.steps[-1]]
            assert [c.group_ranks for c in calls] == [i.group_ranks for i in steady]
            assert _pattern([c.group for c in calls]) == _pattern([i.group for i in steady])
            assert all(c.in_elems for c in calls)  # no call "moves no elements"
        p = plan(traces)
        assert p.world_size == 2 and p.sequence and all(c.group_ranks for c in p.sequence)
        assert any("each group's members are the ranks whose dumps hold its entries" in n for n in p.notes)
    with pytest.raises(UserError, match="give every rank's trace together"):  # one dump alone cannot tell
        load(job("one_rank_group").flight_recorder(rank=0, form=form))


# -- recorded Gloo times, and the step's communication as the replay measures it -----------------


def test_fsdps_gloo_annotations_give_every_call_its_recorded_time(job):
    """_allgather_base_'s gloo:all_gather sits 3 + 3 x the group's size record functions after the op,
    _reduce_scatter_base_'s gloo:all_reduce 4 after: every call of every step is timed."""
    (trace, *_) = load(job("fsdp").kineto())
    assert trace.collectives and all(c.recorded_us is not None for c in trace.collectives)
    p = plan(load(job("fsdp").kineto()))
    assert {c.op for c, _ in p.counts} == {"all_gather", "reduce_scatter_base"}
    assert all(len(times) == STEPS * n for (c, times), (_, n) in zip(p.recorded_us, p.counts))


def test_each_gloo_call_keeps_where_it_ran_for_the_steps_merged_time(job):
    """DDP's async bucket all_reduces run on Gloo's two run-loop threads and overlap: each keeps its
    annotation's span, from which spans.step_wall_us merges a step's (never a time asserted)."""
    (trace, *_) = load(job("ddp").kineto())
    for c in trace.collectives:
        assert c.recorded_span_us is not None and c.recorded_us is not None
        start, end = c.recorded_span_us
        assert end - start == pytest.approx(c.recorded_us, abs=1e-2)  # microsecond timestamps of ~5e12
    for step in trace.steps:
        calls = [c for c in trace.collectives if c.step == step]
        assert step_wall_us(calls) <= sum(c.recorded_us for c in calls) + 1e-2 * len(calls)
