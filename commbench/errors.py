"""The single abort path for user errors: one line, non-zero exit, no traceback."""

from __future__ import annotations

import click


class UserError(click.ClickException):
    """A mistake the user can fix; the message says how. Bugs keep their traceback instead."""

    exit_code = 2

    def show(self, file=None) -> None:  # one line, prefixed like the rest of commbench's output
        click.echo(f"commbench: error: {self.format_message()}", err=True, file=file)
