"""`commbench syncbn`: every SyncBatchNorm strategy on the current backend, compared in one command."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from commbench.cli.execute import chart_after, charts_beside, execute, written
from commbench.cli.op_options import op_flag
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
from commbench.errors import UserError, warn
from commbench.ops.sync_bn import BATCH, CHANNELS, SPATIAL
from commbench.syncbn import NATIVE_VARIANTS, STRATEGY_NAMES


@click.command()
@op_flag(CHANNELS)
@op_flag(BATCH)
@op_flag(SPATIAL)
@click.option(
    "--strategy",
    "strategies",
    multiple=True,
    help="Only these strategies, repeatable or comma-separated (default: all; the native CUDA layers where they run).",
)
@launch_options
@timing_options
@history_options
@metrics_options
@plot_option
@repeat_option
def syncbn(
    channels: tuple[int, ...],
    batch: int,
    spatial: int,
    strategies: tuple[str, ...],
    plot: bool,
    repeat: int,
    **options: object,
) -> None:
    """Compare SyncBatchNorm's communication strategies: time per phase and speedup over horovod.

    \b
    Strategies (docs/syncbn.md; `commbench list` defines S for sync_bn):
      torch            PyTorch >= 1.6: 1 all_gather of [mean, invstd, count]; 1 all_reduce
      torch_legacy     PyTorch ~1.5: 3 async all_gathers; 2 async all_reduces
      apex             1 all_gather of [mean, biased var, count], Welford merge; 1 all_reduce
      horovod          3 async allgathers (count, mean, invstd); 2 async allreduces
      horovod_grouped  1 grouped allgather; 1 grouped allreduce
      allreduce        all_reduce of the count, all_reduce of weighted [mean, E[x^2]]; 1 all_reduce
    On CUDA also native_torch (torch.nn.SyncBatchNorm) and, with --backend horovod, native_horovod.

    Runs the sync_bn op over C for the forward, backward and forward_backward phases, writes the CSV,
    prints mean times with each strategy's speedup over horovod, and charts the run beside the CSV in
    <output stem>-charts/: sync_bn-<phase>-speedup.png (speedup over horovod against C) and
    sync_bn-<phase>.png (latency and busbw against S).
    """
    op_options = {CHANNELS.key: channels, BATCH.key: batch, SPATIAL.key: spatial}
    chosen = split_names(strategies, "--strategy")
    valid = (*STRATEGY_NAMES, *NATIVE_VARIANTS)
    if unknown := [s for s in chosen if s not in valid]:
        raise UserError(f"unknown strategy {unknown[0]!r}; valid strategies: {', '.join(valid)}")
    how = pop_launch(options)
    cfg = build_config(
        ops=("sync_bn",), sizes=[1], op_options=op_options, variants=chosen, side_files=charts_beside(plot), **options
    )
    outcome = execute(cfg, how, repeat)
    if (csv := written(outcome)) is not None:
        _print_comparison(csv)
    chart_after(outcome, plot, cfg.overwrite)
    sys.exit(outcome.code)


def _print_comparison(csv_path: Path) -> None:
    """The speedup table from the CSV; a failure to read it is a warning, never the run's failure."""
    from commbench.analysis.syncbn_table import format_table
    from commbench.results.reader import read_results

    try:
        frame = read_results([csv_path])
        if (launches := frame["run_id"].nunique()) > 1:  # --repeat: the table of the last launch
            frame = frame[frame["run_id"] == frame["run_id"].iloc[-1]]
            click.echo(f"# the last of {launches} launches (compare pools them all):")
        click.echo(format_table(frame) or "# sync_bn: no measured row to compare")
    except UserError as exc:
        warn(f"no sync_bn comparison: {exc.format_message()}")
