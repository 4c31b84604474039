"""bench/trace_reader.py's generated trace is a real Kineto trace: the replay's loader reads back
exactly the collectives it wrote, among far more compute events."""

from __future__ import annotations

import json

from bench.trace_reader import BUCKETS, generate
from commbench.replay.load import load


def test_the_generated_trace_reads_back_its_collectives_among_mostly_compute_events(tmp_path):
    path = tmp_path / "rank0.trace.json"
    collectives = generate(path, 2)
    events = json.loads(path.read_text())["traceEvents"]
    assert sum(e["name"] == "record_param_comms" for e in events) == collectives
    assert collectives * 100 < len(events)  # like a real trace: nearly all events are not collectives
    (trace,) = load([str(path)])
    assert len(trace.collectives) == collectives
    assert [c.in_elems for c in trace.collectives[: len(BUCKETS)]] == list(BUCKETS)
    assert {c.recorded_us for c in trace.collectives} == {2500.0}
