"""How commbench ends: one enum of exit codes, and the single abort path for user errors."""

from __future__ import annotations

from enum import IntEnum

import click


class ExitCode(IntEnum):
    """Every exit code commbench uses; docs/failure-modes.md explains each."""

    OK = 0
    FAILED = 1  # wrong results in a sweep, a regression (or wrong results) in `compare`, a flag in `isolate`
    USAGE = 2  # a mistake the user can fix: bad input, an impossible combination, a refusal
    COLLECTIVE_FAILURE = 3  # a collective failed or timed out, or a rank was lost
    INTERNAL = 4  # a bug in commbench: the traceback is printed, to be reported
    INTERRUPTED = 130  # Ctrl-C


class UserError(click.ClickException):
    """A mistake the user can fix; the message says how. Bugs keep their traceback instead."""

    exit_code = ExitCode.USAGE

    def show(self, file=None) -> None:  # one line, prefixed like the rest of commbench's output
        click.echo(f"commbench: error: {self.format_message()}", err=True, file=file)
