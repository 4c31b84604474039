"""`commbench plot`: charts of one or more result CSVs."""

from __future__ import annotations

from pathlib import Path

import click

from commbench.cli.options import chart_format_option, overwrite_option, results_arguments


@click.command()
@results_arguments
@click.option(
    "--output", "-o", default=None, help="Folder for the charts (default: <first CSV's stem>-charts/ beside it)."
)
@chart_format_option
@overwrite_option
def plot(csvs: tuple[Path, ...], output: str | None, fmt: str, overwrite: bool) -> None:
    """Chart result CSVs: latency and busbw against size per op and phase, speedups per variant family.

    One line per (backend, variant, run): give several CSVs to see runs side by side. Latency shows
    the mean time (the headline) with its 95% interval and a band from the fastest iteration to p95;
    busbw is computed from the mean time.
    Existing charts are replaced only with --overwrite.
    """
    from commbench.results.paths import output_path

    def beside_first(given: Path | None) -> Path:
        from commbench.analysis.charts.render import charts_folder

        return given or charts_folder(csvs[0])

    folder = output_path(output, beside_first)  # before matplotlib is imported: a mistake fails at once
    from commbench.analysis.charts.plot import plot_results

    for path in plot_results(list(csvs), folder, fmt, overwrite):
        click.echo(str(path))
