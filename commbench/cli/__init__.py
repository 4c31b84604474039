"""The `commbench` command group. It only wires commands; each lives in its own module."""

from __future__ import annotations

import click

from commbench import __version__
from commbench.cli.env import env
from commbench.cli.list import list_
from commbench.cli.sweep import sweep


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="commbench")
def main() -> None:
    """Collective-communication benchmarks for PyTorch (NCCL, Gloo) and Horovod.

    Measures all_gather, reduce_scatter and their grouped and bucketed forms with nccl-tests'
    definitions of algbw and busbw, checks every result, and writes tidy CSV rows as it goes.
    Run `commbench list` for the ops and what S means for each.
    """


main.add_command(sweep)
main.add_command(list_)
main.add_command(env)
