"""The replay CSV's rows as rank 0's row output writes them (commbench/replay/summary.py
ReplayRows): each results row matched to its own call, on the shared DDP trace whose five gradient
buckets share op, variant, phase and dtype; and a variant the backend refuses still gets its rows."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import torch

from commbench.console.display import Display
from commbench.replay.adapter import s_bytes
from commbench.replay.chart import per_kind
from commbench.replay.load import load
from commbench.replay.mapping import plan
from commbench.replay.record import Call, Plan
from commbench.replay.summary import (
    ReplayRows,
    phase_tags,
    recorded_calls_us,
    recorded_per_step_us,
    recorded_step_us,
)
from commbench.run.sink import Sink
from tests.replay.plans import ALL_GATHER, ALL_REDUCE, BROADCAST, plan_of

DDP = Path(__file__).resolve().parents[1] / "data" / "traces" / "ddp-2gpu-nccl-kineto.json.gz"


def _sizes(p: Plan) -> dict[Call, int]:
    """Each call's S in bytes, as the replay's rank sets it up (adapter.set_up)."""
    return {
        c: s_bytes(c, len(c.group_ranks), torch.empty((), dtype=getattr(torch, c.dtype)).element_size())
        for c, _ in p.counts
    }


def _results_row(call: Call, tag: str, size: int, p50: float) -> dict[str, Any]:
    return {
        "op": call.op, "variant": call.variant, "phase": tag, "dtype": call.dtype, "size_bytes": size,
        "time_us_p50": p50, "time_us_p50_lo": p50 - 1, "time_us_p50_hi": p50 + 1, "status": "ok", "wrong": 0,
    }  # fmt: skip


def test_every_distinct_call_of_the_ddp_trace_gets_its_own_counts_and_recorded_times() -> None:
    p = plan(load([str(DDP)]))
    tags, sizes = phase_tags(p), _sizes(p)
    buckets = [c for c, _ in p.counts if c.op == "all_reduce"]
    assert len(buckets) == 5 and len({(c.variant, tags[c], c.dtype) for c in buckets}) == 1  # one key but the size
    written: list[dict[str, Any]] = []
    rows = ReplayRows(p, sizes, written.append)
    for i, (call, _) in enumerate(p.counts):
        rows.add(_results_row(call, tags[call], sizes[call], 1000.0 + i))
    rows.add({"op": "step", "variant": "sequence", "phase": "comm", "dtype": "mixed", "time_us_p50": 9000.0})
    calls = [r for r in written if r["kind"] == "call"]
    assert [(r["op"], r["in_elems"], r["count_per_step"]) for r in calls] == [
        (c.op, c.in_elems, n) for c, n in p.counts
    ]
    assert [r["recorded_us_per_step"] for r in calls] == [recorded_per_step_us(p, c) for c, _ in p.counts]
    assert len({r["recorded_us"] for r in calls}) == len(calls)  # each its own kernels' median
    assert [r["time_us_p50"] for r in calls] == [1000.0 + i for i in range(len(calls))]
    step = written[-1]
    assert step["kind"] == "step" and step["recorded_us_per_step"] == recorded_step_us(p)
    # The chart's per-kind bars on the trace side add up to the calls' recorded times per step, and
    # its whole-step bar is the step's own figure (the time its calls ran, overlaps merged), no sum.
    kinds = per_kind([{k: "" if v is None else str(v) for k, v in r.items()} for r in written])
    parts = sum(v[0] for k, v in kinds.items() if k != "whole step")
    assert abs(parts - recorded_calls_us(p)) < 1e-3 and abs(parts - 15625.5) < 1  # the trace's 15.6 ms per step
    assert kinds["whole step"][0] == recorded_step_us(p)


def test_a_variant_the_backend_refuses_gets_a_replay_row_with_the_reason() -> None:
    other = Call("all_gather", "flat", "float32", 500, 1000, (0, 1))
    p = plan_of([BROADCAST, ALL_GATHER, other, ALL_REDUCE])
    tags, sizes = phase_tags(p), _sizes(p)
    written: list[dict[str, Any]] = []
    rows = ReplayRows(p, sizes, written.append)
    rows.add(_results_row(BROADCAST, tags[BROADCAST], sizes[BROADCAST], 50.0))
    refused = "the gloo backend does not implement all_gather flat on this build"
    rows.add({"op": "all_gather", "variant": "flat", "dtype": "float32", "status": "unavailable", "note": refused})
    rows.add(_results_row(ALL_REDUCE, tags[ALL_REDUCE], sizes[ALL_REDUCE], 70.0))
    assert [(r["op"], r["in_elems"], r["status"]) for r in written] == [
        ("broadcast", 77, "ok"),
        ("all_gather", 300, "unavailable"),
        ("all_gather", 500, "unavailable"),
        ("all_reduce", 1000, "ok"),
    ]
    gathers = written[1:3]
    assert all(r["note"] == refused and r["time_us_p50"] is None and r["replayed_us_per_step"] is None for r in gathers)
    assert [r["recorded_us_per_step"] for r in gathers] == [100.0, 100.0]  # what they took in the trace, kept


def test_the_sink_hands_its_unavailable_row_to_the_replay_rows(tmp_path: Path) -> None:
    p = plan_of([ALL_GATHER])
    written: list[dict[str, Any]] = []
    sink = Sink(
        tmp_path / "r.csv", {"run_id": "r", "mode": "blocking", "world_size": 2}, Display("quiet", io.StringIO()), []
    )
    sink.outputs.append(ReplayRows(p, _sizes(p), written.append))
    sink.unavailable("all_gather", "flat", "float32", "refused by the transport")
    sink.close()
    assert [(r["op"], r["status"], r["note"]) for r in written] == [
        ("all_gather", "unavailable", "refused by the transport")
    ]
