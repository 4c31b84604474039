"""The check that a command failed as a user should see it: one line, no traceback."""

from __future__ import annotations

from typing import Any

from click.testing import CliRunner

from commbench.cli import main


def assert_one_line_error(result: Any, *fragments: str, exit_code: int | None = None) -> None:
    """result (a CliRunner result) failed with one non-empty line that holds every fragment.

    exit_code: the exact code expected (2 for a user error); any non-zero code when None.
    """
    assert result.exit_code != 0 if exit_code is None else result.exit_code == exit_code, result.output
    assert "Traceback" not in result.output, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def assert_sweep_refuses(args: list[str], *fragments: str) -> None:
    """`commbench sweep ARGS` is a user error (exit code 2) of one line holding every fragment."""
    assert_one_line_error(CliRunner().invoke(main, ["sweep", *args]), *fragments, exit_code=2)
