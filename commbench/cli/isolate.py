"""`commbench isolate`: a node sweep that names the slow host, GPU/CPU or link."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

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
from commbench.isolate.screens import DEFAULT_SCREEN, SCREENS
from commbench.units import parse_size

if TYPE_CHECKING:
    from commbench.results.outputs import OutputPlan


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
@click.option(
    "--screen",
    type=click.Choice(tuple(SCREENS)),
    default=DEFAULT_SCREEN,
    show_default=True,
    help="Which host pairs meet: adaptive (log2 N rounds of new partners, more while in doubt) or all-pairs (N-1 rounds).",
)
@click.option(
    "--rails",
    default=None,
    metavar="auto|IF0,IF1,...",
    help="Judge each local rank's NIC as a rail of its own (local rank g pairs with local rank g); with Gloo, "
    "name the interface of each local rank, e.g. eth0,eth1.",
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
    screen: str,
    rails: str | None,
    bisect: bool,
    json_path: str | None,
    plot: bool,
    **options: object,
) -> None:
    """Find the slow host, rail, GPU/CPU or link: hosts exchange in pairs, N/2 pairs at once.

    The adaptive screen (the default) runs log2 N rounds in which every host meets a new partner,
    and more while the evidence is ambiguous; all-pairs runs every pair once, in N-1 rounds. Each
    pair of hosts exchanges both ways (local rank i with local rank i) at a bandwidth-bound size
    and at 8 bytes; so do the local ranks of each host, pair by pair. A host whose pairs are slow,
    a link slow between two hosts that are fast elsewhere, a rail (--rails) slow where the host's
    other rails are not, and a rank whose matmul is slow are suspects when they fall below the
    cluster's median by more than --threshold and its noise; each is re-measured beside healthy
    partners and flagged only if it stays slow.

    Writes one CSV row per measured pair (per rail with --rails), <stem>.verdict.json and (with
    --plot) <stem>-isolate.png beside it, and prints the verdict. Exit code 1 when anything is
    flagged, 0 when healthy, 2 when the hosts cannot be swept so (one host, different numbers of
    ranks, too few hosts for the screen, --rails on hosts of one rank). docs/isolate.md.

    \b
      torchrun --nnodes 8 --nproc-per-node 8 ... -m commbench isolate --json verdict.json
      srun -N 8 --ntasks-per-node 8 commbench isolate --backend nccl
    """
    from commbench.isolate.options import ISOLATE_PROGRAM, PROBE_SIZES, IsolateOptions
    from commbench.isolate.report import ISOLATE_CHART, VERDICT_JSON

    chosen = parse_size(size) if size is not None else None
    opts = IsolateOptions(
        size=chosen,
        threshold=threshold if threshold is not None else 0.2,
        bisect=bisect,
        screen=screen,
        rails=rails,
    )
    # The node sweep runs on the launch a sweep makes; what the launcher checks before ranks start
    # (the op's rank count, the host's cores and memory) sees its exchange: sendrecv of float32
    # (isolate/exchanges.py's), up to the largest size it may take. Its outputs are planned with
    # the CSV before any rank starts (results/outputs.py): the verdict file and the chart beside
    # it, and --json, which this process claims and writes once the ranks are done.
    how = pop_launch(options)
    cfg = build_config(
        ops=("sendrecv",),
        sizes=[chosen or max(PROBE_SIZES)],
        dtypes=("float32",),
        program=ISOLATE_PROGRAM,
        program_options=opts.to_dict(),
        side_files=(VERDICT_JSON, *([ISOLATE_CHART] if plot else [])),
        extra_outputs=[(json_path, "--json")] if json_path is not None else [],
        **options,
    )
    outcome = execute(cfg, how)
    try:
        if (csv := written(outcome)) is not None and outcome.outputs is not None:
            _after(csv, plot, json_path, outcome.outputs)
    finally:
        if outcome.outputs is not None:
            outcome.outputs.release()
    sys.exit(outcome.code)


def _after(csv_path: Path, plot: bool, json_path: str | None, outputs: OutputPlan) -> None:
    """What this process writes from the verdict file rank 0 left beside the CSV: --json, claimed
    when planned, and the chart; a failure to draw is a warning, never the verdict."""
    from commbench.isolate.report import draw_beside, read_verdict, verdict_path

    if json_path is not None:
        try:
            document = verdict_path(csv_path).read_bytes()
        except OSError as exc:
            raise UserError(
                f"--json {json_path}: cannot read the verdict {verdict_path(csv_path)}: {exc.strerror}"
            ) from None
        outputs.write(Path(json_path), document)
        click.echo(f"# json: {json_path}")
    if not plot:
        return
    try:
        out = draw_beside(read_verdict(csv_path), csv_path, outputs.overwrite)
    except UserError as exc:
        warn(f"no chart: {exc.format_message()}")
        return
    click.echo(f"# chart: {out}")
