"""`commbench report`: one self-contained HTML file of result CSVs, to attach to a review."""

from __future__ import annotations

from pathlib import Path

import click

from commbench.cli.options import chart_format_option, overwrite_option, results_arguments


@click.command()
@results_arguments
@click.option(
    "--output",
    "-o",
    default=None,
    help="HTML file to write, or a folder to write <first CSV's stem>.html into (default: beside the first CSV).",
)
@chart_format_option
@overwrite_option
def report(csvs: tuple[Path, ...], output: str | None, fmt: str, overwrite: bool) -> None:
    """Write one HTML file with provenance (versions, hosts, world size, command), every chart and the tables.

    Charts are embedded, so the file stands alone: attach it to a review or a ticket. Several runs
    get a table of the runs, what differs between them and their largest differences, and per op a
    panel per variant with the runs as its lines. nccl-tests' -J results.json reads as a run. An
    existing file is replaced only with --overwrite, and never one of the CSVs read.
    """
    from commbench.results.paths import beside, check_target, output_path

    name = beside(csvs[0], ".html").name
    out = output_path(output, lambda folder: (folder or csvs[0].parent) / name)
    check_target(out, overwrite, inputs=csvs)  # before the charts are drawn: fail in a second, not after a minute
    from commbench.analysis.report import write_report

    click.echo(str(write_report(list(csvs), out, fmt)))
