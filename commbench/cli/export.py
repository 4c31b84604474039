"""`commbench export prometheus`: finished results as Prometheus metrics (docs/metrics.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from commbench.cli.options import metrics_push_option, overwrite_option, results_arguments


@click.group()
def export() -> None:
    """Results in other tools' formats."""


@export.command()
@results_arguments
@click.option(
    "--textfile",
    default=None,
    metavar="PATH",
    help="Write a .prom file (or commbench.prom in this folder) for node_exporter's textfile collector, "
    "instead of printing the metrics.",
)
@metrics_push_option
@overwrite_option
def prometheus(csvs: tuple[Path, ...], textfile: str | None, metrics_push: str | None, overwrite: bool) -> None:
    """Result CSVs (or nccl-tests' -J JSON or text logs) as Prometheus metrics under NCCL
    Inspector's names: printed, written for node_exporter (--textfile) and/or pushed (--metrics-push).

    One series per case and configuration; where several files hold one case, the last file's row
    stands. A failed push is one warning and exit code 6.

    \b
      commbench export prometheus results/run.csv | promtool check metrics
      commbench export prometheus results/run.csv --textfile /var/lib/prometheus/node-exporter/
      commbench export prometheus results/run.csv --metrics-push http://pushgateway:9091
    """
    from commbench.errors import ExitCode
    from commbench.results.metrics import exposition, host_labels
    from commbench.results.metrics_output import deliver, push_target, textfile_path
    from commbench.results.outputs import OutputPlan
    from commbench.results.reader import read_results

    target = textfile_path(textfile) if textfile is not None else None
    if metrics_push is not None:
        push_target(metrics_push, "")  # a malformed URL is refused before the CSVs are read
    plan = OutputPlan(overwrite, tuple(csvs))
    if target is not None:
        plan.add(target, "--textfile")
    rows = read_results(list(csvs)).to_dict("records")
    text = exposition(rows)
    if target is None and metrics_push is None:
        click.echo(text, nl=False)
        return
    if not deliver(text, target, metrics_push, host_labels(rows[0])["hostname"] if rows else ""):
        sys.exit(ExitCode.UNDELIVERED)
    click.echo(
        f"# {sum(1 for line in text.splitlines() if line[:1] not in ('#', ''))} samples"
        + (f" in {target}" if target else "")
        + (" pushed" if metrics_push else "")
    )
