"""The phase clock behind the `# time:` line: nested phases count each second once, the line's
categories and its remainder sum to the wall time, and the bench's parser reads the line back."""

from __future__ import annotations

import pytest

from commbench.run.phases import OTHER, PHASES, PhaseClock, parse_time_line, time_line


class Ticks:
    """A clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_inner_phase_is_its_own_time_and_the_outer_one_resumes_after_it() -> None:
    ticks = Ticks()
    clock = PhaseClock(ticks)
    with clock.phase("timed"):
        ticks.now += 2.0
        with clock.phase("control"):
            ticks.now += 0.5
            with clock.phase("history"):
                ticks.now += 0.25
        ticks.now += 1.0
    with clock.phase("timed"):
        ticks.now += 3.0
    ticks.now += 7.0  # outside any phase: the line's `other`
    assert clock.totals == {"timed": 6.0, "control": 0.5, "history": 0.25}
    assert sum(clock.totals.values()) == ticks.now - clock.began - 7.0


def test_a_phase_that_raises_still_counts_and_leaves_the_stack_as_it_was() -> None:
    ticks = Ticks()
    clock = PhaseClock(ticks)
    with clock.phase("timed"):
        with pytest.raises(RuntimeError), clock.phase("check"):
            ticks.now += 1.5
            raise RuntimeError("a wrong result")
        ticks.now += 1.0
    assert clock.totals == {"check": 1.5, "timed": 1.0}


def test_added_seconds_join_their_category_and_never_subtract() -> None:
    clock = PhaseClock(Ticks())
    clock.add("charts", 2.0)
    clock.add("charts", 1.0)
    clock.add("teardown", -0.01)  # two processes' clocks a tick apart
    assert clock.totals == {"charts": 3.0, "teardown": 0.0}


def test_the_record_places_the_clock_in_epoch_seconds() -> None:
    ticks = Ticks()
    clock = PhaseClock(ticks)
    ticks.now += 4.0
    record = clock.record()
    assert record["ended"] == pytest.approx(record["began"] + 4.0)
    assert record["totals"] is clock.totals


def test_the_line_names_every_category_and_its_remainder_makes_the_wall_time() -> None:
    totals = {"startup": 3.0, "timed": 40.0, "warmup": 5.0, "charts": 7.0}
    line = time_line(totals, 60.0)
    parsed = parse_time_line(line)
    assert parsed is not None
    wall, read = parsed
    assert wall == 60.0
    assert list(read) == [*PHASES, OTHER]
    assert read["timed"] == 40.0 and read[OTHER] == pytest.approx(5.0)
    assert sum(read.values()) == pytest.approx(wall)
    assert "timed 40.00 s (66.7%)" in line


def test_phases_that_overrun_the_wall_time_leave_no_negative_remainder() -> None:
    wall, read = parse_time_line(time_line({"timed": 10.0}, 9.99)) or (0.0, {})
    assert read[OTHER] == 0.0 and wall == 9.99


def test_other_lines_are_not_time_lines() -> None:
    assert parse_time_line("# done: results in out.csv") is None
    assert parse_time_line("# time: wall soon") is None
