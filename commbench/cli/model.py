"""`commbench model`: fit a latency-bandwidth model to result CSVs, and project it to other world sizes."""

from __future__ import annotations

import json
from pathlib import Path

import click

from commbench.cli.options import chart_format_option, overwrite_option, results_arguments


@click.command()
@results_arguments
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    default=None,
    help="Folder for the charts (default: <first CSV's stem>-model/ beside it; with --json, none unless given).",
)
@click.option(
    "--predict-n",
    default=None,
    help="Project the fits to these world sizes, e.g. 8,64,512 (a model, not a measurement).",
)
@click.option(
    "--algorithm",
    default="ring",
    show_default=True,
    help="Cost model of the projection: ring (ring / pairwise) or tree (recursive doubling and halving, binomial, Bruck).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the fits and projections as JSON instead of tables.")
@chart_format_option
@overwrite_option
def model(
    csvs: tuple[Path, ...],
    output: Path | None,
    predict_n: str | None,
    algorithm: str,
    as_json: bool,
    fmt: str,
    overwrite: bool,
) -> None:
    """Fit T(S) = alpha + S / beta (Hockney) to every op measured at 4 or more sizes, and chart the fits.

    Prints alpha (us), beta (GB/s), the half-performance size n1/2 = alpha x beta, R^2 and the worst
    relative residual per (op, variant, phase, dtype, mode, backend, world size). With --predict-n,
    projects each fit to other world sizes through the textbook cost model of --algorithm: clearly a
    model, and refused where the line does not fit. docs/model.md has the formulas and their limits.
    """
    from commbench.analysis.charts.render import write_charts
    from commbench.analysis.model import (
        MIN_SIZES,
        Projection,
        check_algorithm,
        fit_frame,
        format_fits,
        format_projections,
        model_charts,
        parse_world_sizes,
        project,
    )
    from commbench.errors import UserError
    from commbench.results.paths import beside
    from commbench.results.reader import read_results

    check_algorithm(algorithm)
    world_sizes = parse_world_sizes(predict_n) if predict_n is not None else []
    frame = read_results(list(csvs))
    fits, skipped = fit_frame(frame)
    if not fits:
        why = f" ({'; '.join(skipped[:3])})" if skipped else ""
        raise UserError(
            f"nothing to fit in {', '.join(map(str, csvs))}: a fit needs {MIN_SIZES} or more sizes of one op{why}; sweep more sizes (-b/-e/-f)"
        )
    projections: list[Projection] = []
    refused: list[str] = []
    largest_of = frame.groupby(["run", "op"])["size_bytes"].max()  # once, not a filter per fit
    for fit in fits:
        largest = int(largest_of[(fit.key[0], fit.key[1])])
        for n in world_sizes:
            result = project(fit, algorithm, n, largest)
            (projections if isinstance(result, Projection) else refused).append(result)
    if as_json:
        document = {
            "model": "T(S) = alpha_us + S / (beta_gbps * 1e3)",
            "fits": [f.as_dict() for f in fits],
            "not_fitted": skipped,
            "projections": {
                "algorithm": algorithm,
                "note": "a model, not a measurement",
                "rows": [p.as_dict() for p in projections],
                "not_projected": sorted(set(refused)),
            },
        }
        click.echo(json.dumps(document, indent=2, default=float))
    else:
        click.echo(format_fits(fits, skipped))
        if world_sizes:
            click.echo(format_projections(projections, refused, algorithm))
    if output is not None or not as_json:
        folder = output or beside(csvs[0], "-model")
        written = write_charts(model_charts(frame, fits), folder, fmt, overwrite)
        if not as_json:
            click.echo(f"# charts: {folder}/ ({len(written)} files)")
