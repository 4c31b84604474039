"""`commbench replay` end to end through the CLI on 2 Gloo ranks with its own spawner: a real
FSDP job recorded here (tests/support/recorded_jobs.py) is issued again exactly as it issued its
collectives (op, shape, dtype, group, order, count per step), seen inside the spawned ranks both as
commbench set each call up and as torch received it (torch.profiler's c10d:: events); and the
shared ResNet Execution Trace replays with every collective mapped, its counts and sizes as recorded.
One replay run per trace, shared by the assertions (module-scoped fixtures)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from commbench.replay.load import load
from commbench.replay.mapping import plan
from tests.replay.captured import replay
from tests.support.distributed import REPO
from tests.support.recorded_jobs import record

pytestmark = pytest.mark.slow
RESNET = REPO / "tests" / "data" / "traces" / "resnet-2gpu-et.json.gz"
C10D = {"all_gather": "c10d::_allgather_base_", "reduce_scatter_base": "c10d::_reduce_scatter_base_"}
TORCH_TYPE = {"float32": "float", "bfloat16": "c10::BFloat16"}


def _replay(traces: list[str], out: Path) -> tuple[str, list[dict], list[dict[str, str]]]:
    """The CLI's replay on 2 Gloo ranks: its stdout, each rank's capture, the replay CSV's rows."""
    done = replay(traces, out)
    return done.stdout, done.ranks, done.rows


@pytest.fixture(scope="module")
def fsdp(tmp_path_factory):
    root = tmp_path_factory.mktemp("fsdp")
    recording = record("fsdp", root / "job")
    return recording, _replay(recording.kineto(), root / "replay")


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    return _replay([str(RESNET)], tmp_path_factory.mktemp("resnet"))


def test_the_recorded_fsdp_job_is_issued_again_exactly_as_it_issued_its_step(fsdp) -> None:
    recording, (_, ranks, _) = fsdp
    for rank, captured in enumerate(ranks):
        job = recording.steady(rank)  # what the job issued in each steady step, in order
        assert [(*c[:5], tuple(c[5])) for c in captured["calls"]] == [
            (i.op, i.variant, i.dtype, i.in_elems, i.out_elems, i.group_ranks) for i in job
        ], f"rank {rank}"
        # and torch received exactly those calls: op, output and input shapes, dtype, in that order
        assert captured["comms"] == [
            [C10D[i.op], [[i.out_elems], [i.in_elems]], TORCH_TYPE[i.dtype], []] for i in job
        ], f"rank {rank}"


def test_the_fsdp_replay_csv_counts_each_call_as_often_as_the_job_issued_it_per_step(fsdp) -> None:
    recording, (_, _, rows) = fsdp
    issued = Counter((i.op, i.dtype, i.in_elems) for i in recording.steady(0))
    calls = [r for r in rows if r["kind"] == "call"]
    assert Counter({(r["op"], r["dtype"], int(r["in_elems"])): int(r["count_per_step"]) for r in calls}) == issued
    assert all(r["status"] == "ok" and r["wrong"] == "0" for r in calls)
    unmapped = [r for r in rows if r["kind"] == "unmapped"]  # only ever the set-up before the profiled steps
    assert all("outside the profiler steps" in r["note"] for r in unmapped), unmapped


def test_the_resnet_execution_trace_replays_every_collective_with_its_counts_and_sizes(resnet) -> None:
    stdout, ranks, rows = resnet
    p = plan(load([str(RESNET)]))
    assert p.unmapped == () and "not replayed" not in stdout
    assert [r["kind"] for r in rows].count("unmapped") == 0
    calls = [r for r in rows if r["kind"] == "call"]
    assert [(r["op"], r["dtype"], int(r["in_elems"]), int(r["count_per_step"])) for r in calls] == [
        (c.op, c.dtype, c.in_elems, n) for c, n in p.counts
    ]
    assert all(r["status"] == "ok" and r["wrong"] == "0" for r in calls)
    for rank, captured in enumerate(ranks):  # the step as issued: the trace's sequence, in its order
        assert [(c[0], c[2], c[3]) for c in captured["calls"]] == [(c.op, c.dtype, c.in_elems) for c in p.sequence], (
            f"rank {rank}"
        )
        assert [e[0] for e in captured["comms"]] == [
            {"all_reduce": "c10d::allreduce_", "broadcast": "c10d::broadcast_"}[c.op] for c in p.sequence
        ]
