"""The public GPU traces in tests/data/traces, read and mapped as a user would bring them: every
collective mapped, counts and sizes as the file records them (counted here with plain json, not
through the readers), and the trace without sizes refused in one line."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from commbench.errors import UserError
from commbench.replay.load import load
from commbench.replay.mapping import SUM_ASSUMED, plan, unmapped_shares

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
DDP = TRACES / "ddp-2gpu-nccl-kineto.json.gz"
RESNET = TRACES / "resnet-2gpu-et.json.gz"
OLD = TRACES / "old-16gpu-kineto-no-sizes.json.gz"
OPS = {"allreduce": "all_reduce", "broadcast": "broadcast"}
DTYPES = {"Float": "float32", "Long": "int64"}


def _kineto_counts() -> tuple[Counter, int, dict[int, float]]:
    """Per step: (op, dtype, elements) counted from the file's record_param_comms, waits left out."""
    events = json.loads(gzip.decompress(DDP.read_bytes()))["traceEvents"]
    steps = [e for e in events if str(e.get("name")).startswith("ProfilerStep#")]
    comms = [e["args"] for e in events if e.get("name") == "record_param_comms"]
    kernels = {e["args"]["External id"]: e["dur"] for e in events if e.get("cat") == "kernel" and "nccl" in e["name"]}
    wanted = [a for a in comms if a["Collective name"] != "wait"]
    every = Counter((OPS[a["Collective name"]], DTYPES[a["dtype"]], a["In msg nelems"]) for a in wanted)
    per_step = Counter({k: v // len(steps) for k, v in every.items()})
    assert all(v % len(steps) == 0 for v in every.values())
    return per_step, len(steps), {a["External id"]: kernels[a["External id"]] for a in wanted}


def test_the_ddp_kineto_trace_maps_every_collective_with_its_recorded_counts_sizes_and_times():
    expected, steps, kernel_us = _kineto_counts()
    p = plan(load([str(DDP)]))
    assert p.unmapped == ()
    assert p.world_size == 2 and p.steps == steps == 3
    assert Counter({(c.op, c.dtype, c.in_elems): n for c, n in p.counts}) == expected
    assert sum(expected.values()) == len(p.sequence) == 7  # 5 gradient buckets + 2 buffer broadcasts a step
    assert {c.group_ranks for c in p.sequence} == {(0, 1)}
    recorded = sorted(t for _, times in p.recorded_us for t in times)
    assert recorded == sorted(kernel_us.values())  # each collective's time: its own GPU kernel's dur
    assert any(n.startswith(SUM_ASSUMED) for n in p.notes)
    assert any("stands for all 2 ranks" in n for n in p.notes)
    assert unmapped_shares(p) == []


def test_the_resnet_execution_trace_maps_every_collective_with_its_recorded_counts_and_sizes():
    nodes = json.loads(gzip.decompress(RESNET.read_bytes()))["nodes"]
    attrs = [{a["name"]: a["value"] for a in n["attrs"]} for n in nodes if n["name"] == "record_param_comms"]
    wanted = [a for a in attrs if a["collective_name"] != "wait"]
    steps = sum(1 for n in nodes if n["name"].startswith("ProfilerStep#"))
    every = Counter((OPS[a["collective_name"]], DTYPES[a["dtype"]], a["in_msg_nelems"]) for a in wanted)
    p = plan(load([str(RESNET)]))
    assert p.unmapped == ()
    assert p.steps == steps == 3
    assert Counter({(c.op, c.dtype, c.in_elems): n * steps for c, n in p.counts}) == every
    assert len(wanted) == 21 and len(attrs) - len(wanted) == 6  # 15 allreduce + 6 broadcast; 6 waits skipped
    assert all(times == () for _, times in p.recorded_us)  # an Execution Trace records no time


def test_the_two_formats_of_the_same_kind_of_job_give_the_same_plan():
    kineto, et = plan(load([str(DDP)])), plan(load([str(RESNET)]))
    assert kineto.sequence == et.sequence


def test_the_old_trace_without_sizes_is_refused_saying_which_pytorch_records_them():
    with pytest.raises(UserError) as err:
        load([str(OLD)])
    line = err.value.line()
    assert "\n" not in line
    assert "carry no sizes" in line and "PyTorch 2.1 or later" in line and "ExecutionTraceObserver" in line
