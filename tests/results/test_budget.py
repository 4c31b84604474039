"""The iteration budget: one statement of how many samples a case gets, read back from a command line."""

from __future__ import annotations

from commbench.results.budget import Budget


def test_a_recorded_command_gives_the_budget() -> None:
    assert Budget.from_command("commbench sweep --time-per-size 0.05 --min-iters=40 -o x.csv") == Budget(0.05, 40)
    assert Budget.from_command("commbench sweep -n 200") == Budget(iters=200)
    assert Budget.from_command("commbench sweep --iters auto") == Budget()
    assert Budget.from_command("") == Budget()
