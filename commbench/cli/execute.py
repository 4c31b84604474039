"""What a measuring command (sweep, syncbn, isolate) does once its options are a validated
SweepConfig: run it, as one rank of a launcher's job or by spawning local ranks, then chart it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from commbench.errors import ExitCode, UserError, warn
from commbench.run.config import Outcome, SweepConfig

if TYPE_CHECKING:
    from commbench.launch.env import LaunchOptions


def execute(cfg: SweepConfig, how: LaunchOptions, repeat: int = 1) -> Outcome:
    """Run the sweep as one rank of a launcher's job, or by spawning local ranks (`repeat` times:
    --repeat). The files the command writes itself after the run (cfg.extra_outputs: --json) are
    planned with the run's outputs and claimed; the outcome's plan holds them, for its caller to
    write and release."""
    from commbench.launch.start import start_launches

    return start_launches(cfg, how, repeat)


def charts_beside(plot: bool) -> tuple[str, ...]:
    """The side file a charted run plans beside its CSV: its charts folder (results/outputs.py)."""
    from commbench.analysis.charts.render import CHARTS_BESIDE

    return (CHARTS_BESIDE,) if plot else ()


# A run that ran to its end: every result written (some wrong, or the metrics' push failed).
COMPLETED = (ExitCode.OK, ExitCode.FAILED, ExitCode.UNDELIVERED)


def written(outcome: Outcome) -> Path | None:
    """The CSV the run wrote, where it ran to its end (COMPLETED) and this process owns
    the CSV: what a command prints and charts from. None for an interrupted or failed run."""
    if outcome.code in COMPLETED and outcome.output is not None and outcome.output.exists():
        return outcome.output
    return None


def chart_after(outcome: Outcome, plot: bool, overwrite: bool = False) -> None:
    """Chart the run (_chart) and say where its wall time went: the `# time:` line, built from rank
    0's phase clock (commbench/run/phases.py) and what this process timed itself."""
    import time

    began = time.time()
    _chart(outcome, plot, overwrite)
    print_time_line(outcome, time.time() - began)


def print_time_line(outcome: Outcome, charts_s: float) -> None:
    """The `# time:` line, when rank 0 recorded its phases beside the CSV (a run that ended early did not).

    This process's wall time starts at its import of commbench; what rank 0's clock did not cover
    (spawning it, its imports) is start-up, and what came after it ended (the ranks' exit, the
    launcher's teardown), less the charts, is teardown."""
    import time

    import commbench
    from commbench.provenance import recorded_phases
    from commbench.run.phases import PhaseClock, time_line

    # A run that stopped (not COMPLETED) recorded no phases: what its CSV's .env.json may hold is another run's.
    if outcome.code not in COMPLETED or outcome.output is None or (record := recorded_phases(outcome.output)) is None:
        return
    try:
        began, ended, totals = float(record["began"]), float(record["ended"]), dict(record["totals"])
    except (KeyError, TypeError, ValueError):
        return
    now = time.time()
    clock = PhaseClock()
    for name, seconds in totals.items():
        clock.add(str(name), float(seconds))
    clock.add("startup", began - commbench.STARTED)
    clock.add("charts", charts_s)
    clock.add("teardown", now - ended - charts_s)
    click.echo(time_line(clock.totals, now - commbench.STARTED))


def _chart(outcome: Outcome, plot: bool, overwrite: bool = False) -> None:
    """Chart a finished run beside its CSV, from the process that owns the CSV (the launching
    process, or rank 0 under a launcher).

    Charts are a convenience on top of the CSV: a failure to draw them is a warning and never
    changes the exit code. An interrupted or failed run (not COMPLETED) is not charted. Charts already
    beside the CSV are replaced only under the run's --overwrite.
    """
    if not plot or (csv := written(outcome)) is None:
        return
    from commbench.analysis.charts.plot import plot_beside

    try:
        paths = plot_beside(csv, overwrite=overwrite)
    except UserError as exc:
        warn(f"no charts: {exc.format_message()}")
        return
    click.echo(f"# charts: {paths[0].parent}/ ({len(paths)} files)")
