"""`commbench sweep`: every selected op over a range of sizes."""

from __future__ import annotations

import sys

import click

from commbench.cli.execute import chart_after, charts_beside, execute
from commbench.cli.op_options import op_option_flags, pop_op_options, pop_variants
from commbench.cli.options import (
    build_config,
    history_options,
    launch_options,
    metrics_options,
    plot_option,
    pop_launch,
    repeat_option,
    split_names,
    timing_options,
)
from commbench.errors import UserError, closest
from commbench.units import parse_size, parse_size_list, size_range


def refuse_extra_arguments(extra: list[str]) -> None:
    """sweep takes no arguments: an op named without --op is shown how to ask for it."""
    if not extra:
        return
    from commbench.ops import registry

    ops = registry()
    for given in extra:
        if (op := given if given in ops else closest(given, ops)) is not None:
            raise UserError(
                f"unexpected argument {given!r}: ops are chosen with --op, e.g. `commbench sweep --op {op}`"
            )
    raise UserError(f"unexpected extra argument {extra[0]!r}: sweep takes options only (see `commbench sweep --help`)")


# Extra arguments reach the command (rather than click's bare "unexpected extra argument"), so
# `commbench sweep all_gather` can be told that ops are chosen with --op.
@click.command(context_settings={"allow_extra_args": True})
@click.pass_context
@click.option(
    "--op",
    "ops",
    multiple=True,
    help="Op to run, repeatable or comma-separated (default: every op in `commbench list`).",
)
@click.option("--min-bytes", "-b", default="8", show_default=True, help="Smallest size (units K, M, G).")
@click.option("--max-bytes", "-e", default="64M", show_default=True, help="Largest size.")
@click.option(
    "--factor", "-f", type=float, default=2.0, show_default=True, help="Multiply the size by this between steps."
)
@click.option("--sizes", default=None, help="Explicit comma-separated sizes instead of -b/-e/-f, e.g. 1K,64K,4M.")
@launch_options
@timing_options
@history_options
@metrics_options
@op_option_flags
@plot_option
@repeat_option
def sweep(
    ctx: click.Context,
    ops: tuple[str, ...],
    min_bytes: str,
    max_bytes: str,
    factor: float,
    sizes: str | None,
    plot: bool,
    repeat: int,
    **options: object,
) -> None:
    """Measure collectives over a range of sizes; one CSV row per (op, variant, phase, dtype, size).

    Sizes are S as nccl-tests defines it for each op (see `commbench list` and docs/ops.md), rounded
    to the nearest element count the op can use (a multiple of the world size); the bytes actually
    moved are reported.

    \b
    Spawns --nproc local ranks, or joins the ranks of a launcher:
      commbench sweep
      torchrun --nproc_per_node=4 --no-python commbench sweep --op all_gather -b 1K -e 1G
      torchrun --nproc_per_node=4 -m commbench sweep --op all_gather -b 1K -e 1G
      horovodrun -np 2 --gloo commbench sweep --backend horovod
    """
    refuse_extra_arguments(ctx.args)
    ops = split_names(ops, "--op")
    chosen = (
        parse_size_list(sizes)
        if sizes is not None
        else size_range(parse_size(min_bytes), parse_size(max_bytes), factor)
    )
    op_options, variants = pop_op_options(options), pop_variants(options)
    how = pop_launch(options)
    cfg = build_config(
        ops=ops, sizes=chosen, op_options=op_options, variants=variants, side_files=charts_beside(plot), **options
    )
    outcome = execute(cfg, how, repeat)
    chart_after(outcome, plot, cfg.overwrite)
    sys.exit(outcome.code)
