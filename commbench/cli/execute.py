"""What a measuring command (sweep, syncbn, isolate) does once its options are a validated
SweepConfig: run it, as one rank of a launcher's job or by spawning local ranks, then chart it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from commbench.errors import UserError, warn
from commbench.run.config import Outcome, SweepConfig

if TYPE_CHECKING:
    from commbench.launch.env import LaunchOptions


def execute(cfg: SweepConfig, how: LaunchOptions, repeat: int = 1) -> Outcome:
    """Run the sweep as one rank of a launcher's job, or by spawning local ranks (`repeat` times:
    --repeat)."""
    from commbench.launch.start import start_launches

    return start_launches(cfg, how, repeat)


def chart_after(outcome: Outcome, plot: bool, overwrite: bool = False) -> None:
    """Chart a finished run beside its CSV, from the process that owns the CSV (the launching
    process, or rank 0 under a launcher).

    Charts are a convenience on top of the CSV: a failure to draw them is a warning and never
    changes the exit code. An interrupted or failed run (code > 1) is not charted. Charts already
    beside the CSV are replaced only under the run's --overwrite.
    """
    if not plot or outcome.code not in (0, 1) or outcome.output is None or not outcome.output.exists():
        return
    from commbench.analysis.charts.plot import plot_beside

    try:
        paths = plot_beside(outcome.output, overwrite=overwrite)
    except UserError as exc:
        warn(f"no charts: {exc.format_message()}")
        return
    click.echo(f"# charts: {paths[0].parent}/ ({len(paths)} files)")
