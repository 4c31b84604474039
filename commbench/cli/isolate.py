"""`commbench isolate`: a node sweep that names the slow host, GPU/CPU or link."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from commbench.cli.execute import execute, written
from commbench.cli.options import (
    _fraction,
    budget_options,
    build_config,
    config_option,
    launch_options,
    plot_option,
    pop_launch,
)
from commbench.errors import UserError, warn
from commbench.units import parse_size


@click.command()
@click.option(
    "--size", default=None, help="Bytes each rank of a pair sends (default: chosen by a short probe), e.g. 4M."
)
@click.option(
    "--threshold",
    default="20%",
    show_default=True,
    callback=_fraction,
    help="Flag a score this far below the cluster's median (and beyond its noise bound), e.g. 20%.",
)
@click.option("--bisect", is_flag=True, help="Also bisect the hosts with all_reduce over halves run at once.")
@click.option(
    "--json",
    "json_path",
    default=None,
    help="Also write the verdict (hosts, flagged_hosts, flagged_links, flagged_ranks, evidence) here.",
)
@budget_options(
    "Timed exchanges per pair and size, or auto to fill --time-per-size.",
    "With --iters auto: seconds of timed exchanges per pair and size.",
    "Blocks each pair's samples are timed in, interleaved with the other size's.",
)
@config_option("warmup", "Untimed exchanges per pair and size.")
@launch_options
@plot_option
def isolate(
    size: str | None,
    threshold: float,
    bisect: bool,
    json_path: str | None,
    plot: bool,
    **options: object,
) -> None:
    """Find the slow host, GPU/CPU or link: every pair of hosts exchanges, in N-1 rounds of N/2 pairs at once.

    Each pair of hosts exchanges both ways (local rank i with local rank i) at a bandwidth-bound
    size and at 8 bytes; so do the local ranks of each host, pair by pair. A host whose pairs are
    slow, a link slow between two hosts that are fast elsewhere and a rank whose matmul is slow are
    suspects when they fall below the cluster's median by more than --threshold and its noise; each
    is re-measured against healthy partners and flagged only if it stays slow.

    Writes one CSV row per measured pair, <stem>.verdict.json and (with --plot) <stem>-isolate.png
    beside it, and prints the verdict. Exit code 1 when anything is flagged, 0 when healthy, 2
    when the ranks are on one host or the hosts run different numbers of ranks. docs/isolate.md.

    \b
      torchrun --nnodes 8 --nproc-per-node 8 ... -m commbench isolate --json verdict.json
      srun -N 8 --ntasks-per-node 8 commbench isolate --backend nccl
    """
    from commbench.isolate.options import ISOLATE_PROGRAM, PROBE_SIZES, IsolateOptions

    chosen = parse_size(size) if size is not None else None
    json_file = str(Path(json_path).resolve()) if json_path is not None else None
    if json_file is not None:
        from commbench.results.paths import check_target

        if not Path(json_file).parent.is_dir():
            raise UserError(f"--json {json_path}: give a file in an existing folder")
        check_target(Path(json_file), bool(options.get("overwrite")), flag="--json")
    opts = IsolateOptions(
        size=chosen, threshold=threshold if threshold is not None else 0.2, bisect=bisect, json=json_file
    )
    # The node sweep runs on the launch a sweep makes; what the launcher checks before ranks start
    # (the op's rank count, the host's cores and memory) sees its exchange: sendrecv of float32
    # (isolate/exchanges.py's), up to the largest size it may take.
    how = pop_launch(options)
    cfg = build_config(
        ops=("sendrecv",),
        sizes=[chosen or max(PROBE_SIZES)],
        dtypes=("float32",),
        program=ISOLATE_PROGRAM,
        program_options=opts.to_dict(),
        **options,
    )
    outcome = execute(cfg, how)
    if plot and (csv := written(outcome)) is not None:
        _chart(csv)
    sys.exit(outcome.code)


def _chart(csv_path: Path) -> None:
    """The matrix and score chart beside the CSV; a failure to draw is a warning, never the verdict."""
    from commbench.isolate.report import ISOLATE_CHART, draw, read_verdict
    from commbench.results.paths import beside

    try:
        out = draw(read_verdict(csv_path), beside(csv_path, ISOLATE_CHART))
    except UserError as exc:
        warn(f"no chart: {exc.format_message()}")
        return
    click.echo(f"# chart: {out}")
