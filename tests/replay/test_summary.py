"""What a replay reports: the replay CSV's rows, the step and verdict lines, the unmapped list."""

from __future__ import annotations

import dataclasses

from commbench.replay.record import Call
from commbench.replay.summary import (
    call_row,
    digits,
    ms,
    phase_tags,
    recorded_calls_us,
    recorded_step_us,
    step_line,
    step_row,
    unmapped_lines,
    unmapped_rows,
    verdict_line,
)
from tests.replay.plans import ALL_GATHER, ALL_TO_ALL, BROADCAST, DIGEST, fsdp_like, plan_of, tensor_parallel

MEASURED = {"time_us_p50": "41200", "time_us_p50_lo": "39800", "time_us_p50_hi": "43000", "status": "ok", "wrong": "0"}


def test_phase_tags_give_every_distinct_call_its_own_row_key() -> None:
    tags = phase_tags(tensor_parallel())
    assert list(tags.values()) == ["comm@0,1", "comm@2,3", "comm"]
    assert phase_tags(fsdp_like())[BROADCAST] == "comm root 1"
    twin = Call("all_gather", "flat", "float32", 300, 600, (0, 1), peer=None, tensors=2)  # same key as ALL_GATHER
    assert list(phase_tags(plan_of([ALL_GATHER, twin])).values()) == ["comm", "comm #2"]


def test_a_call_row_holds_its_count_recorded_and_replayed_times() -> None:
    plan = fsdp_like()
    row = call_row(plan, ALL_GATHER, 2, MEASURED)
    assert row["count_per_step"] == 2 and row["recorded_us"] == 100.5 and row["recorded_us_per_step"] == 201.0
    assert row["replayed_us_per_step"] == 82400.0 and row["time_us_p50_lo"] == "39800"
    assert (row["group_ranks"], row["trace_digest"]) == ("0,1", DIGEST)
    assert call_row(plan, ALL_TO_ALL, 1, None)["splits"] == "10,30;30,20"
    assert call_row(plan, ALL_TO_ALL, 1, None)["status"] == "not run"


def test_the_step_in_the_trace_is_the_time_its_calls_ran_and_their_sum_a_second_figure() -> None:
    plan = plan_of([ALL_GATHER, ALL_GATHER, BROADCAST], steps=2)  # 4 gathers and 2 broadcasts over 2 steps
    summed = (100 + 101 + 102 + 103) / 2 + (100 + 101) / 2
    assert recorded_calls_us(plan) == summed
    assert recorded_step_us(plan) is None  # no spans recorded: no step to set beside the step here
    assert step_row(plan, MEASURED)["recorded_us_per_step"] is None
    merged = dataclasses.replace(plan, recorded_wall_us=(250.0, 350.0))  # each step's calls overlapping
    assert recorded_step_us(merged) == 300.0 < summed
    assert step_row(merged, MEASURED)["recorded_us_per_step"] == 300.0
    assert step_row(merged, MEASURED)["replayed_us_per_step"] == 41200.0


def test_the_verdict_line_compares_like_with_like_and_says_which() -> None:
    plan = dataclasses.replace(plan_of([ALL_GATHER] * 100), recorded_wall_us=(12500.0,))  # calls: 14.95 ms
    line = verdict_line(MEASURED, plan, 2, "gloo (torch 2.13.0+cpu)", "nccl 2.17.1")
    assert line == (
        "# step communication here 41.2 ms (95%: 39.8-43.0) on 2 ranks of gloo (torch 2.13.0+cpu); "
        "in the trace 12.5 ms on 2 ranks of nccl 2.17.1 (the time the step's calls ran, overlaps merged, as here; "
        "its calls' own times add up to 14.9 ms)"
    )
    sums = plan_of([ALL_GATHER] * 100)  # times but no spans (a Flight Recorder dump with duration_ms)
    calls = [{"replayed_us_per_step": "1500"}, {"replayed_us_per_step": "500"}]
    assert verdict_line(MEASURED, sums, 2, "gloo", "nccl 2.17.1", calls).endswith(
        "; the trace on 2 ranks of nccl 2.17.1 gives no figure for the step (its calls' spans merged): "
        "its calls' times add up to 14.9 ms a step, here 2.00 ms (each call timed alone)"
    )
    untimed = dataclasses.replace(plan_of([ALL_GATHER]), recorded_us=())
    assert verdict_line(MEASURED, untimed, 2, "gloo", "").endswith("; the trace on 2 ranks recorded no times")


def test_the_step_line_sets_the_sequence_beside_the_calls_added_up() -> None:
    calls = [{"replayed_us_per_step": "1500"}, {"replayed_us_per_step": "500"}]
    assert step_line(MEASURED, calls) == (
        "# step: 41.2 ms (95%: 39.8 ms-43.0 ms) for the sequence issued back to back; "
        "its 2 distinct calls timed one at a time add up to 2.00 ms"
    )


def test_unmapped_collectives_are_listed_with_reason_and_share_of_the_recorded_time() -> None:
    plan = fsdp_like()  # six calls recorded at 100-101 us each (601 us), one unmapped at 50 us
    assert unmapped_rows(plan)[0]["note"] == "no op for coalesced all_gather_base; 7.7% of the recorded time"
    assert unmapped_lines(plan) == [
        "# not replayed: 1 collective(s) the replay cannot issue",
        "#   _allgather_base_coalesced float32 8 elements on ranks 0,1: no op for coalesced all_gather_base; "
        "7.7% of the recorded time",
    ]
    assert unmapped_lines(tensor_parallel()) == []


def test_times_keep_three_digits_without_an_exponent() -> None:
    assert [digits(v) for v in (43.0, 0.601, 120.0, 1459.7, 123456.0)] == ["43.0", "0.601", "120", "1460", "123000"]
    assert ms(1.46e6) == "1460 ms"
