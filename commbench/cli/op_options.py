"""The options ops declare (`OpSpec.options`), rendered as flags of the measuring commands.

Each op reads the keys it understands and ignores the rest; one flag keeps one meaning across ops.
Adding an option to an op is declaring it in the op's module: it appears here by itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

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
        fn = click.option(option.flag, option.key, default=None, help=option.help)(fn)
    return fn


def pop_op_options(options: dict[str, Any]) -> dict[str, str]:
    """Take the op-declared values out of a command's keyword arguments; only those the user gave."""
    from commbench.ops import op_options

    given = {option.key: options.pop(option.key, None) for option in op_options()}
    return {key: str(value) for key, value in given.items() if value}


def pop_variants(options: dict[str, Any]) -> tuple[str, ...]:
    """--variant values, split on commas."""
    return tuple(v.strip() for value in options.pop("variants", ()) or () for v in value.split(",") if v.strip())
