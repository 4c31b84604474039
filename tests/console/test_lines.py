"""The warning channel: library layers call errors.warn(); the entry point that installed a shower
shows each warning as one `commbench: warning:` line, and without one it is a Python warning."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from commbench.console.lines import show_warning
from commbench.errors import CommbenchWarning, UserError, warn, warnings_shown_by


def test_a_warning_goes_to_the_installed_shower_else_to_pythons_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    heard: list[str] = []
    with warnings_shown_by(heard.append), warnings_shown_by(show_warning):
        warn("the hosts differ")  # the innermost shower only
    assert heard == [] and capsys.readouterr().err == "commbench: warning: the hosts differ\n"
    with warnings_shown_by(heard.append):
        warn("a cut row")
    assert heard == ["a cut row"]
    with pytest.warns(CommbenchWarning, match="^nobody shows this$"):
        warn("nobody shows this")
    assert capsys.readouterr().err == ""


def test_a_user_error_is_no_click_exception_yet_the_cli_ends_it_in_one_line_and_exit_2() -> None:
    from commbench.cli import CommbenchGroup

    assert not isinstance(UserError("x"), click.ClickException)

    @click.group(cls=CommbenchGroup)
    def group() -> None:
        pass

    @group.command()
    def refuse() -> None:
        warn("first a warning")
        raise UserError("--sizes must be positive byte counts")

    result = CliRunner().invoke(group, ["refuse"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "commbench: warning: first a warning",
        "commbench: error: --sizes must be positive byte counts",
    ]
