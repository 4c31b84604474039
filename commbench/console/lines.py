"""The lines commbench writes besides its table and progress: a warning or an error on stderr, a
plain line (a rank's notes, the launcher's) where it is asked. The CLI and a rank's worker install
show_warning as the shower of commbench.errors' warning channel; library layers only call warn()."""

from __future__ import annotations

import click

from commbench.errors import UserError, tell_launcher

WARNING_PREFIX = "commbench: warning: "


def printable(line: str) -> str:
    """The line with every character that is not printable (a newline, a carriage return, an
    escape sequence's ESC, a Unicode line separator, a bidirectional override) written as its
    escape (`\\n`, `\\x1b`, `\\u2028`): text from a file or a database, a host name or a path,
    cannot forge a line of its own or redraw the terminal."""
    if line.isprintable():
        return line
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in line)


def show_warning(text: str) -> None:
    click.echo(printable(f"{WARNING_PREFIX}{text}"), err=True)


def show_error(line: str) -> None:
    """An error's one line on stderr, handed to torchrun's error file as well."""
    line = printable(line)
    click.echo(line, err=True)
    tell_launcher(line)


def show_user_error(exc: UserError) -> None:
    show_error(exc.line())


def say(text: str, err: bool = False) -> None:
    """One line on stdout (or stderr), flushed: a spawned rank's output reaches the launcher at once."""
    click.echo(text, err=err)
