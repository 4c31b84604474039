"""What a replay reports: the replay CSV's rows, the step and verdict lines, the unmapped list."""

from __future__ import annotations

import dataclasses

from commbench.replay.record import Call
from commbench.replay.summary import (
    call_row,
    digits,
    ms,
    phase_tags,
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


def test_the_step_is_recorded_as_the_mapped_calls_sum_per_step() -> None:
    plan = plan_of([ALL_GATHER, ALL_GATHER, BROADCAST], steps=2)  # 4 gathers and 2 broadcasts over 2 steps
    assert recorded_step_us(plan) == (100 + 101 + 102 + 103) / 2 + (100 + 101) / 2
    assert step_row(plan, MEASURED)["replayed_us_per_step"] == 41200.0


def test_the_verdict_line_reads_as_the_issue_asks() -> None:
    plan = plan_of([ALL_GATHER] * 100)  # recorded 100..199 us: 14.95 ms per step
    line = verdict_line(MEASURED, plan, 2, "gloo (torch 2.13.0+cpu)", "nccl 2.17.1")
    assert line == (
        "# step communication here 41.2 ms (95%: 39.8-43.0) on 2 ranks of gloo (torch 2.13.0+cpu); "
        "in the trace 14.9 ms on 2 ranks of nccl 2.17.1"
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
