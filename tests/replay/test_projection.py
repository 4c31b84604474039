"""--project: the step's communication at other world sizes, from the model fitted on this cluster."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from commbench.errors import UserError
from commbench.replay.projection import (
    MEASURED_ERROR,
    StepProjection,
    parse_targets,
    project_step,
    projection_lines,
)
from commbench.replay.record import Call
from commbench.replay.summary import call_row, digits
from tests.replay.plans import plan_of
from tests.support.synth_results import Case, synth_run

ALL_REDUCE = Call("all_reduce", "flat", "float32", 1000, 1000, (0, 1))
PAIR = Call("all_reduce", "flat", "float32", 1000, 1000, (0, 1))
GATHER = Call("all_gather", "flat", "float32", 250, 500, (0, 1))


def sweep(tmp_path: Path, *cases: Case) -> Path:
    # T = 100 us + S / 2 GB/s at every size, with no noise: the fit is the line itself.
    return synth_run(tmp_path / "sweep.csv", list(cases), seed=1, sigma=1e-9, raw=False)


def test_world_sizes_are_whole_numbers_of_two_or_more() -> None:
    assert parse_targets("16,64,512") == [16, 64, 512]
    for bad in ("16,a", "1", "", "16,,64"):
        with pytest.raises(UserError, match="--project"):
            parse_targets(bad)


def test_the_step_is_projected_through_the_ring_model_of_each_call(tmp_path: Path) -> None:
    csv = sweep(tmp_path, Case("all_reduce", "flat"), Case("all_gather", "flat"))
    plan = plan_of([ALL_REDUCE, ALL_REDUCE, GATHER])
    (p16,) = project_step(plan, [csv], [16], "ring", "gloo")
    # Fitted at n=2: alpha 100 us, 2 GB/s. Ring all_reduce on p ranks: 2(p-1) alpha_link + 2(p-1)/p S beta_link,
    # so alpha_link = 50 us and beta_link = 2 GB/s; at 16 ranks, S = 4000 B: 30 x 50 + 1.875 x 4000 / 2000 us.
    all_reduce_16 = 30 * 50 + 1.875 * 4000 / 2000
    # all_gather: (p-1) alpha_link + (p-1)/p S beta_link, fitted at 2 (1 x alpha_link, S/2 over the link):
    # alpha_link 100 us, 1 GB/s; at 16 ranks each rank still sends its 250 elements: S = 16 x 1000 B.
    all_gather_16 = 15 * 100 + (15 / 16) * 16000 / 1000
    assert p16.time_us == pytest.approx(2 * all_reduce_16 + all_gather_16, rel=1e-3)
    assert (p16.projected_calls, p16.missing) == (2, ())
    lines = projection_lines([p16], "ring")
    assert lines[0].startswith("# projection (a MODEL, not a measurement; ring cost model fitted on this cluster;")
    assert lines[1] == f"#   projected step communication on 16 ranks: {digits(p16.time_us / 1e3)} ms"
    # the error bench/replay_projection.py measured, beside every projection
    assert lines[2] == f"#   how far off it was, measured: {MEASURED_ERROR}"


def test_calls_without_a_fit_are_named_and_left_out(tmp_path: Path) -> None:
    csv = sweep(tmp_path, Case("all_reduce", "flat"))
    (p,) = project_step(plan_of([ALL_REDUCE, GATHER]), [csv], [8], "ring", "gloo")
    assert p.projected_calls == 1 and p.missing == ("all_gather/flat float32: no fit",)
    assert (
        "1 distinct call(s) without a fit left out: all_gather/flat float32: no fit" in projection_lines([p], "ring")[1]
    )


def test_no_model_is_one_line_saying_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"pass --model with a sweep CSV .*`commbench sweep --op all_gather`"):
        project_step(plan_of([GATHER]), [], [16], "ring", "gloo")
    csv = sweep(tmp_path, Case("broadcast", "flat"))
    with pytest.raises(UserError, match=r"no fit in .*sweep\.csv matches the step's calls"):
        project_step(plan_of([GATHER]), [csv], [16], "ring", "gloo")


def test_a_fit_whose_line_does_not_fit_says_so(tmp_path: Path) -> None:
    broken = Case("all_reduce", "flat", factors_by_size={8: 40.0, 65536: 0.05})  # no line through these
    csv = sweep(tmp_path, broken, Case("all_gather", "flat"))
    (p,) = project_step(plan_of([ALL_REDUCE, GATHER]), [csv], [8], "ring", "gloo")
    assert p.projected_calls == 1 and "the line does not fit (R^2" in p.missing[0]


def test_a_projection_of_a_second_or_more_prints_without_an_exponent() -> None:
    lines = projection_lines([StepProjection(512, 1.4567e6, 7, ())], "ring")
    assert lines[1] == "#   projected step communication on 512 ranks: 1460 ms"


def test_the_projection_predicts_the_statistic_the_replay_reports(tmp_path: Path) -> None:
    """At the fit's own world size and a swept S, a call's projection is the sweep's figure at that S,
    and the replay reports the same figure of a results row: both the p50, on rows whose mean a slow
    mode (30% of the iterations, 1.5x to 4x slower) moves by 15% to 90%, by a different factor at each size."""
    sizes = (8, 1024, 4000, 65536, 1 << 20)
    slow = dict(zip(sizes, (1.5, 4.0, 2.5, 3.0, 1.8)))
    path = sweep(tmp_path, Case("all_reduce", "flat", sizes=sizes, slow_by_size=slow))
    with open(path, newline="", encoding="utf-8") as f:
        row = next(r for r in csv.DictReader(f) if r["size_bytes"] == "4000")  # ALL_REDUCE's S
    plan = plan_of([ALL_REDUCE])
    (projected,) = project_step(plan, [path], [2], "ring", "gloo")
    replayed = call_row(plan, ALL_REDUCE, 1, row)["replayed_us_per_step"]
    assert projected.time_us == pytest.approx(replayed, rel=1e-6)
    assert float(row["time_us_mean"]) > 1.4 * replayed  # the other statistic is far from both
