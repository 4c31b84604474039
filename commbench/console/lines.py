"""The lines commbench writes besides its table and progress: a warning or an error on stderr, a
plain line (a rank's notes, the launcher's) where it is asked. The CLI and a rank's worker install
show_warning as the shower of commbench.errors' warning channel; library layers only call warn()."""

from __future__ import annotations

import click

from commbench.errors import UserError, tell_launcher

WARNING_PREFIX = "commbench: warning: "


def show_warning(text: str) -> None:
    click.echo(f"{WARNING_PREFIX}{text}", err=True)


def show_error(line: str) -> None:
    """An error's one line on stderr, handed to torchrun's error file as well."""
    click.echo(line, err=True)
    tell_launcher(line)


def show_user_error(exc: UserError) -> None:
    show_error(exc.line())


def say(text: str, err: bool = False) -> None:
    """One line on stdout (or stderr), flushed: a spawned rank's output reaches the launcher at once."""
    click.echo(text, err=err)
