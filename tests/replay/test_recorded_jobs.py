"""Traces recorded here, from real 2-rank Gloo jobs, by torch.profiler and ExecutionTraceObserver:
the plan reproduces exactly what each job issued (op, variant, dtype, sizes, splits, group, order,
count per step), from both formats, from every rank's trace and from one rank's alone. And a real
Flight Recorder dump: ProcessGroupGloo records into it on torch 2.13."""

from __future__ import annotations

import os
import pickle

import pytest

from commbench.replay.load import load
from commbench.replay.mapping import plan
from tests.support.distributed import run_ranks
from tests.support.recorded_jobs import Issued, record

pytestmark = pytest.mark.slow


def _assert_replays(issued: list[Issued], files: list[str], steps: int) -> None:
    p = plan(load(files))
    assert len(p.sequence) == len(issued), (p.sequence, issued)
    for call, want in zip(p.sequence, issued):
        assert want.matches(call), (call, want)
    assert p.steps >= steps - 1  # the first profiled step also holds the profiler's own start-up broadcasts
    assert p.unmapped == () or all("outside the profiler steps" in u.reason for u in p.unmapped)


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    root = tmp_path_factory.mktemp("recorded")
    return {job: record(job, root / job) for job in ("ddp", "fsdp", "all_to_all")}


@pytest.mark.parametrize("job", ["ddp", "fsdp", "all_to_all"])
@pytest.mark.parametrize("fmt", ["kineto", "execution_traces"])
def test_the_plan_reproduces_the_recorded_sequence_exactly(recordings, job, fmt):
    rec = recordings[job]
    _assert_replays(rec.steady(), getattr(rec, fmt)(), steps=3)


@pytest.mark.parametrize("job", ["ddp", "fsdp"])
def test_one_ranks_trace_stands_for_all_in_a_symmetric_job(recordings, job):
    rec = recordings[job]
    _assert_replays(rec.steady(), rec.kineto(rank=1), steps=3)
    assert any("stands for all 2 ranks" in n for n in plan(load(rec.kineto(rank=1))).notes)


def test_the_ddp_job_holds_gradient_buckets_and_buffer_broadcasts(recordings):
    ops = [i.op for i in recordings["ddp"].steady()]
    assert ops.count("all_reduce") >= 2 and ops.count("broadcast") == 2


def test_the_fsdp_job_all_gathers_and_reduce_scatters(recordings):
    ops = {i.op for i in recordings["fsdp"].steady()}
    assert ops == {"all_gather", "reduce_scatter_base"}


def test_the_uneven_all_to_all_needs_every_ranks_splits(recordings):
    rec = recordings["all_to_all"]
    (issued,) = rec.steady()
    assert len({v for row in issued.splits for v in row}) > 1  # uneven indeed
    alone = plan(load(rec.kineto(rank=0)))
    assert alone.sequence == () and all("other ranks' splits" in u.reason for u in alone.unmapped)


def _flight_recorder_dump(_backend, folder: str) -> list[tuple[str, int]]:
    import torch
    import torch.distributed as dist
    from torch._C._distributed_c10d import _dump_fr_trace

    os.environ["TORCH_FR_BUFFER_SIZE"] = "64"  # read when a group is made: the one below records
    group = dist.new_group(backend="gloo")
    t = torch.ones(100)
    dist.all_reduce(t, group=group)
    dist.all_gather_into_tensor(torch.empty(200), t, group=group)
    dist.broadcast(torch.zeros(7, dtype=torch.int64), 0, group=group)
    rank = dist.get_rank()
    data = _dump_fr_trace()
    with open(f"{folder}/fr_rank_{rank}", "wb") as f:
        f.write(data)
    return [(e["profiling_name"], e["collective_seq_id"]) for e in pickle.loads(data)["entries"]]


def test_a_real_flight_recorder_dump_of_gloo_ranks_is_read(tmp_path):
    recorded = run_ranks(_flight_recorder_dump, 2, str(tmp_path))
    assert recorded[0] == [("gloo:all_reduce", 1), ("gloo:all_gather", 2), ("gloo:broadcast", 3)]  # Gloo records
    p = plan(load([str(tmp_path)]))
    assert [(c.op, c.variant, c.dtype, c.in_elems, c.out_elems) for c in p.sequence] == [
        ("all_reduce", "flat", "float32", 100, 100),
        ("all_gather", "flat", "float32", 100, 200),
        ("broadcast", "flat", "int64", 7, 7),
    ]
    assert any("aligned per process group by Seq" in n for n in p.notes)
