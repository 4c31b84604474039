"""`commbench replay TRACE...`: a real job's collectives measured again on this cluster."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

import click

from commbench.cli.execute import execute, written
from commbench.cli.options import (
    budget_options,
    build_config,
    history_options,
    launch_options,
    metrics_options,
    plot_option,
    pop_launch,
    precision_option,
    sample_options,
)
from commbench.errors import UserError, warn


def _trace_paths(_ctx: click.Context, _param: click.Parameter, given: tuple[str, ...]) -> tuple[Path, ...]:
    from commbench.replay.source import trace_paths

    return trace_paths(given)


@click.command()
@click.argument("traces", nargs=-1, type=click.Path(), callback=_trace_paths)
@click.option(
    "--trace-limit",
    "trace_limits",
    multiple=True,
    metavar="NAME=VALUE",
    help="Raise (or lower) a budget the readers hold each trace file to, e.g. bytes=64G or events=1e9 "
    "(repeatable; names: bytes, pickle-bytes, events, elements, collectives, event-bytes; docs/replay.md).",
)
@click.option(
    "--scale",
    is_flag=True,
    help="On fewer ranks than the trace's groups need: place each group on min(its size, the launch's) "
    "consecutive ranks from its first rank mod the launch's size (the output states it).",
)
@click.option(
    "--project",
    default=None,
    help="Project the step's communication to these world sizes, e.g. 16,64,512 (a model, needs --model).",
)
@click.option(
    "--model",
    "model_csvs",
    multiple=True,
    type=click.Path(path_type=Path),
    help="A sweep CSV of this cluster that --project fits its latency-bandwidth model on (repeatable).",
)
@click.option(
    "--algorithm",
    default="ring",
    show_default=True,
    help="--project's cost model: ring or tree (as `commbench model --algorithm`).",
)
@click.option(
    "--json", "json_path", default=None, help="Also write the replay (calls, step, verdict, projection) here."
)
@budget_options(
    "Timed iterations per call and for the step: a number, or auto to fill --time-per-size.",
    "With --iters auto: seconds of timed work per call and for the step.",
)
@precision_option("Stop a call early once its mean is this precise.")
@sample_options
@launch_options
@history_options
@metrics_options
@plot_option
def replay(
    traces: tuple[Path, ...],
    scale: bool,
    project: str | None,
    model_csvs: tuple[Path, ...],
    algorithm: str,
    json_path: str | None,
    trace_limits: tuple[str, ...],
    plot: bool,
    **options: Any,
) -> None:
    """Replay the collectives of a job's traces (profiler, Execution Trace, Flight Recorder) here.

    Every distinct collective of a step is timed on its own (one row each, with its count per step
    and its recorded time), then the step's sequence is issued back to back as the job issued it,
    groups included, and timed as one measurement: the step's communication time with its
    interval. Writes the results CSV (in the history, fingerprinted with the traces' digest, so
    `compare --history` pairs replays of one job), <stem>.replay.csv and <stem>-replay.png beside
    it, and the verdict line. docs/replay.md.

    \b
      commbench replay trace_rank0.json trace_rank1.json
      torchrun --nproc-per-node 8 -m commbench replay traces/ --backend nccl
      commbench replay traces/ --scale --project 16,64,512 --model results/sweep.csv
    """
    from commbench.replay.codec import plan_to_dict
    from commbench.replay.fit import fit
    from commbench.replay.projection import parse_targets, project_step
    from commbench.replay.source import read_plan
    from commbench.replay.summary import REPLAY_CHART, REPLAY_CSV

    if not traces:
        raise UserError("no trace given: pass the trace files (or a folder of them) a PyTorch job wrote")
    targets = parse_targets(project) if project is not None else []
    for model_csv in model_csvs:
        if not model_csv.is_file():
            raise UserError(f"--model {model_csv}: no such file; give a CSV that `commbench sweep` wrote")
    source = read_plan(traces, trace_limits)
    plan = source.plan
    # torch (seconds to import) only once the traces are read: a wrong one is refused at once, and a
    # Ctrl-C during the read is not lost in torch's import (whose numpy set-up swallows it).
    from commbench.replay.rank import REPLAY_PROGRAM, ReplayOptions, refuse_unreplayable

    how = pop_launch(options)
    backend = options.get("backend") or _default_backend()
    # A launch too small, or a call the ops cannot issue exactly, is refused before any rank starts.
    refuse_unreplayable(fit(plan, _launch_world(backend, how), scale)[0])
    projections = project_step(plan, model_csvs, targets, algorithm, backend) if targets else []
    sizes = [max([8, *(c.in_elems * 8 for c, _ in plan.counts)])]  # a barrier alone moves no bytes
    from commbench.run.config import DTYPES

    dtypes = tuple(d for d in dict.fromkeys(c.dtype for c in plan.sequence) if d in DTYPES) or ("float32",)
    cfg = build_config(
        ops=tuple(dict.fromkeys(c.op for c in plan.sequence)),
        sizes=sizes,
        dtypes=dtypes,
        program=REPLAY_PROGRAM,
        program_options=ReplayOptions(plan_to_dict(plan), scale, source.recorded_on).to_dict(),
        workload_digest=plan.digest,
        side_files=(REPLAY_CSV, *([REPLAY_CHART] if plot else [])),
        inputs=(*source.files, *map(str, model_csvs)),
        extra_outputs=[(json_path, "--json")] if json_path is not None else [],
        **options,
    )
    outcome = execute(cfg, how)
    try:
        if (csv := written(outcome)) is not None:
            json_file = None if json_path is None else Path(json_path)
            _report(csv, plan, source.recorded_on, projections, algorithm, plot, json_file, outcome)
    finally:
        if outcome.outputs is not None:
            outcome.outputs.release()
    sys.exit(outcome.code)


def _default_backend() -> str:
    from commbench.backends import default_backend

    return default_backend()


def _launch_world(backend: str, how: Any) -> int:
    """The ranks this launch will have: the launcher's, or the ranks commbench will spawn."""
    from commbench.launch.env import detect
    from commbench.launch.start import default_nproc

    launch = detect(master_addr=how.master_addr, master_port=how.master_port)
    if launch.is_rank:
        return launch.world_size
    return how.nproc if how.nproc is not None else default_nproc(backend)


def _report(
    csv_path: Path,
    plan: Any,
    recorded_on: str,
    projections: list,
    algorithm: str,
    plot: bool,
    json_file: Path | None,
    outcome: Any,
) -> None:
    """The step line, the verdict, what was not replayed and the projection; the chart and --json
    (planned and claimed with the run's outputs before any rank started: outcome.outputs)."""
    from commbench.replay.projection import projection_lines
    from commbench.replay.summary import read_replay, replay_path, step_line, unmapped_lines, verdict_line
    from commbench.results.stats import TYPICAL

    rows = read_replay(replay_path(csv_path))
    step = next((r for r in rows if r["kind"] == "step" and r.get(TYPICAL)), None)
    calls = [r for r in rows if r["kind"] == "call"]
    with open(csv_path, newline="", encoding="utf-8") as f:
        first = next(csv.DictReader(f), {})
    world, backend = first.get("world_size", "?"), first.get("backend_version") or first.get("backend", "")
    lines = []
    if step is not None:
        lines += [step_line(step, calls), verdict_line(step, plan, int(world), backend.strip(), recorded_on, calls)]
    lines += unmapped_lines(plan)
    if projections:
        lines += projection_lines(projections, algorithm)
    click.echo("\n".join(lines))
    chart = None
    if plot:
        from commbench.replay.chart import write_replay_chart

        try:
            chart = write_replay_chart(
                csv_path, rows, lines[1].lstrip("# ") if step else str(csv_path), outcome.outputs.overwrite
            )
            click.echo(f"# chart: {chart}")
        except UserError as exc:
            warn(f"no chart: {exc.format_message()}")
    if json_file is not None:
        import commbench
        from commbench.results.ownership import JSON_MARK, WRITTEN_BY

        document = {
            JSON_MARK: f"{WRITTEN_BY} {commbench.__version__}",
            "results": str(csv_path),
            "replay": str(replay_path(csv_path)),
            "chart": None if chart is None else str(chart),
            "trace_digest": plan.digest,
            "recorded_on": recorded_on,
            "recorded_world_size": plan.world_size,
            "notes": list(plan.notes),
            "rows": rows,
            "lines": lines,
            "projection": {
                "note": "a model, not a measurement",
                "algorithm": algorithm,
                "rows": [p.as_dict() for p in projections],
            },
        }
        outcome.outputs.write(json_file, json.dumps(document, indent=1) + "\n")
        click.echo(f"# json: {json_file}")
