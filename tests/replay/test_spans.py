"""A step's communication in the trace as the replay's step measures it (commbench/replay/spans.py):
the time its calls ran, overlapping calls merged, never their durations added up."""

from __future__ import annotations

from commbench.replay.record import Collective
from commbench.replay.spans import merged_us, step_wall_us


def _ran(start: float, end: float) -> Collective:
    return Collective(
        "allreduce", "float32", 8, 8, "0", (0, 1), 0, recorded_us=end - start, recorded_span_us=(start, end)
    )


def test_overlapping_spans_are_merged_and_gaps_between_them_left_out() -> None:
    assert merged_us([]) == 0.0
    assert merged_us([(0.0, 10.0), (20.0, 25.0)]) == 15.0  # apart: the gap is compute, not communication
    assert merged_us([(0.0, 10.0), (5.0, 15.0)]) == 15.0  # overlapping
    assert merged_us([(0.0, 30.0), (5.0, 10.0), (12.0, 20.0)]) == 30.0  # nested in a longer one
    assert merged_us([(10.0, 20.0), (0.0, 10.0)]) == 20.0  # touching, in any order


def test_a_step_of_async_calls_counts_each_moment_once() -> None:
    # DDP's two bucket all_reduces on Gloo's two run-loop threads, the second issued before the first ended
    step = [_ran(100.0, 10_100.0), _ran(2_000.0, 9_000.0), _ran(15_000.0, 16_000.0)]
    assert sum(c.recorded_us or 0.0 for c in step) == 18_000.0
    assert step_wall_us(step) == 11_000.0
    untimed = Collective("allreduce", "float32", 8, 8, "0", (0, 1), 0)
    assert step_wall_us([untimed]) is None  # an Execution Trace, a Flight Recorder dump: no spans
    assert step_wall_us([*step, untimed]) == 11_000.0
