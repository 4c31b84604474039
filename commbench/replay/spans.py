"""A step's communication in a trace as the replay's step measures it. The replay issues the step's
calls back to back and times them as one: the time from the first call's start until every call is
done. In the job, calls overlap one another (async collectives on Gloo's two run-loop threads, NCCL
kernels on several streams) and compute: adding up each call's recorded time counts an overlap twice
(a DDP step of 91-111 ms wall time "took" 165 ms of communication so). The like quantity in a trace is
the time some call of the step was running, its calls' recorded spans merged."""

from __future__ import annotations

from collections.abc import Iterable

from commbench.replay.record import Collective


def merged_us(spans: Iterable[tuple[float, float]]) -> float:
    """The length of the union of the spans (start, end): time covered by at least one of them."""
    total = 0.0
    reach: float | None = None  # the latest end among the spans sorted so far
    for start, end in sorted(spans):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def step_wall_us(collectives: Iterable[Collective]) -> float | None:
    """One step's communication in the trace, overlaps merged: the union of its collectives' recorded
    spans; None where none of them recorded one (an Execution Trace, a Flight Recorder dump)."""
    spans = [c.recorded_span_us for c in collectives if c.recorded_span_us is not None]
    return merged_us(spans) if spans else None
