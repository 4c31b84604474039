"""The options ops declare (`OpSpec.options`), rendered as flags of the measuring commands.

Each op reads the keys it understands and ignores the rest; one flag keeps one meaning across ops.
Adding an option to an op is declaring it in the op's module: it appears here by itself, typed
(click parses it with the option's kind, so a bad value ends the command in one line before any
rank starts) and with its default shown.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from commbench.ops.options import OpOption

F = Callable[..., Any]

VARIANT_HELP = (
    "Run only these variants (repeatable or comma-separated) of each op that has any of them; an op with "
    "none of them runs all of its own. Names are in `commbench list`."
)


def op_option_flags(fn: F) -> F:
    """Add every registered op's options, and --variant, to a command."""
    from commbench.ops import op_options

    fn = click.option("--variant", "variants", multiple=True, help=VARIANT_HELP)(fn)
    for option in reversed(op_options()):
        fn = op_flag(option)(fn)
    return fn


def op_flag(option: OpOption) -> Callable[[F], F]:
    """One op option as a click option, typed by its kind, with the option's default (shown in --help);
    an option without one (each op that reads it has its own) stays None when not given."""
    return click.option(
        option.flag,
        option.key,
        type=OptionType(option),
        default=option.default_text,
        show_default=option.default_text is not None,
        help=option.help,
    )


class OptionType(click.ParamType):
    """click's face of an OpOption: converts with the option's kind; a bad value raises the kind's
    one-line UserError, which the command group prints as every other user error."""

    def __init__(self, option: OpOption) -> None:
        self.option = option
        self.name = option.kind.metavar

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return self.option.parse(value) if isinstance(value, str) else value


def pop_op_options(options: dict[str, Any]) -> dict[str, Any]:
    """Take the op-declared values, typed, out of a command's keyword arguments: given or defaulted."""
    from commbench.ops import op_options

    given = {option.key: options.pop(option.key, None) for option in op_options()}
    return {key: value for key, value in given.items() if value is not None}


def pop_variants(options: dict[str, Any]) -> tuple[str, ...]:
    """--variant values, split on commas, each once."""
    from commbench.cli.options import split_names

    return split_names(tuple(options.pop("variants", ()) or ()), "--variant")
