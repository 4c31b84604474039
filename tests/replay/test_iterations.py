"""A Flight Recorder dump cut into its iterations (commbench/replay/readers/iterations.py): the
longest run of one sequence of calls repeated, what precedes and follows it left out and said, on
hand-built entries; the real Gloo jobs' dumps are in test_recorded_shapes.py."""

from __future__ import annotations

from commbench.replay.readers.iterations import Run, iterations, longest_repeat
from commbench.replay.record import Collective

LOOP: tuple = (("train.py", "main", 1), ("train.py", "train", 40))  # the loop's call, outermost first
SETUP: tuple = (("train.py", "main", 1), ("train.py", "train", 12))
END: tuple = (("train.py", "main", 1), ("train.py", "train", 55))


def _c(name: str, n: int, group: str = "0") -> Collective:
    return Collective(name, "float32", n, n, group, (0, 1), 0)


def test_the_longest_repeat_is_found_and_aligned_on_what_follows_it() -> None:
    assert longest_repeat("xyzABCABCABCz") == Run(3, 3, 3)
    # a first iteration whose first call differs: the run's periodic stretch begins at "B", but what
    # follows the loop (the barrier, z) fixes where its iterations end
    assert longest_repeat("A'BCABCABCz".replace("A'", "D")) == Run(3, 3, 2)
    # a dump taken mid-iteration (on a timeout): the iterations begin where the run begins
    assert longest_repeat("xABCABCAB") == Run(1, 3, 2)
    assert longest_repeat("abcdef") is None
    assert longest_repeat("AAAA") == Run(0, 1, 4)  # the shortest sequence on a tie
    assert longest_repeat("abcdefgAA", least=3) is None  # two like calls are no loop of a 9-entry dump


def test_a_dump_with_set_up_loop_and_end_is_cut_and_says_what_it_left_out() -> None:
    setup = [_c("broadcast", 302088), _c("broadcast", 1)]
    first = [_c("broadcast", 9), _c("allreduce", 301064)]  # the first iteration: another sequence
    steady = [_c("broadcast", 1024), _c("allreduce", 266760), _c("allreduce", 34304)]
    entries = [*setup, *first, *steady * 3, _c("barrier", 0)]
    stacks = [SETUP] * 2 + [LOOP] * 11 + [END]
    cut = iterations(entries, stacks)
    assert cut.count == 3 and cut.steps == (None,) * 4 + (1, 1, 1, 2, 2, 2, 3, 3, 3, None)
    assert cut.line == (
        "a Flight Recorder dump: 3 iterations of 3 calls found by their repeating sequence (op, group, dtype, "
        "element counts and Python stack); left out: 2 set-up entries; 2 entries of the loop's first iterations, "
        "which issue another sequence; 1 entry after the loop (the final barrier)"
    )
    json = iterations(entries, None)  # a JSON dump keeps no stacks: set-up and loop cannot be told apart
    assert json.steps == cut.steps
    assert json.line.endswith(
        "left out: 4 entries before them (set-up, or iterations that issue another sequence); "
        "1 entry after them (the final barrier)"
    )


def test_iterations_whose_counts_change_are_found_by_their_stacks_or_said_not_found() -> None:
    dispatch, combine = (*LOOP, ("moe.py", "route", 5)), (*LOOP, ("moe.py", "route", 7))
    entries = [_c("alltoall_base", n) for n in (176, 128, 144, 112, 144, 96, 160, 240)] + [_c("barrier", 0)]
    stacks = [dispatch, combine] * 4 + [END]
    cut = iterations(entries, stacks)
    assert cut.count == 4 and cut.steps == (1, 1, 2, 2, 3, 3, 4, 4, None)
    assert "(op, group, dtype and Python stack; their element counts change from one to the next)" in cut.line
    none = iterations(entries, None)
    assert none.count == 0 and none.steps == (None,) * 9
    assert none.line == (
        "a Flight Recorder dump with no iterations found (its calls repeat by op and group, but their element "
        "counts change from one iteration to the next, as an MoE's all_to_alls do): its 9 entries, set-up and "
        "the job's end included, are replayed as one sequence"
    )


def test_calls_of_two_groups_repeat_as_one_sequence() -> None:
    step = [_c("allreduce", 256, "2"), _c("allreduce", 256, "1"), _c("allreduce", 1000, "1")]
    cut = iterations([*step * 4, _c("barrier", 0)], None)
    assert (cut.count, cut.steps[:3]) == (4, (1, 1, 1))
    assert iterations([_c("barrier", 0)], None).line.startswith(
        "a Flight Recorder dump with no iterations found (no sequence of its calls repeats): its 1 entry"
    )
