"""Options shared by the measuring commands, declared once (sqlite-utils' habit), and the launch path."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Any, Callable

import click

from commbench.config import DTYPES, MODES, SweepConfig
from commbench.errors import UserError

F = Callable[..., Any]


def _compose(*decorators: F) -> Callable[[F], F]:
    def apply(fn: F) -> F:
        for decorator in reversed(decorators):
            fn = decorator(fn)
        return fn

    return apply


def _split_csv(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(v.strip() for value in values for v in value.split(",") if v.strip())


launch_options = _compose(
    click.option("--backend", default=None, help="gloo, nccl, horovod (default: nccl when a GPU is usable, else gloo)."),
    click.option("--nproc", type=int, default=None, help="Ranks to spawn when not under torchrun or horovodrun (default: 2 on CPU, every GPU with nccl)."),
    click.option("--output", "-o", default="", help="CSV path (default: results/<timestamp>-<backend>-n<world>.csv)."),
    click.option("--overwrite", is_flag=True, help="Replace an existing --output file instead of refusing."),
    click.option("--timeout", type=float, default=300.0, show_default=True, help="Seconds a collective may take before the rank ends with a diagnosis."),
    # Read by start() from the context, so the commands' signatures and SweepConfig stay as they are.
    click.option("--master-addr", default=None, expose_value=False, callback=lambda ctx, _, v: ctx.meta.update(master_addr=v),
                 help="Under srun or mpirun: rank 0's host, reachable from every rank (default: 127.0.0.1 on one host, else SLURM's first node)."),
    click.option("--master-port", type=int, default=None, expose_value=False, callback=lambda ctx, _, v: ctx.meta.update(master_port=v),
                 help="Under srun or mpirun: the rendezvous port (default: derived from the job id, else 29500)."),
)

measure_options = _compose(
    click.option("--dtype", "dtypes", multiple=True, callback=_split_csv, help=f"Element type, repeatable: {', '.join(DTYPES)} (default float32)."),
    click.option("--iters", "-n", type=int, default=20, show_default=True, help="Timed iterations per size."),
    click.option("--warmup", "-w", type=int, default=5, show_default=True, help="Untimed iterations per size."),
    click.option("--mode", type=click.Choice(MODES), default="blocking", show_default=True,
                 help="blocking: barrier, then time issue+wait of one op; nonblocking: issue --window ops, wait all, time / window."),
    click.option("--window", type=int, default=8, show_default=True, help="Ops in flight per sample in nonblocking mode."),
    click.option("--check/--no-check", default=True, show_default=True, help="Verify every result and count wrong elements."),
    click.option("--raw", is_flag=True, help="Also write per-iteration, per-rank samples to <output>.raw.csv."),
)


def build_config(*, ops: tuple[str, ...], sizes: list[int], backend: str | None, dtypes: tuple[str, ...],
                 op_options: dict[str, str] | None = None, **kwargs: Any) -> SweepConfig:
    """Validate what the user typed into a SweepConfig; every mistake is a one-line UserError."""
    from commbench.backends import check_backend, default_backend
    from commbench.ops import OPS, resolve_target
    from commbench.ops.options import validate_op_options

    backend = backend or default_backend()
    check_backend(backend)
    for name in ops:
        resolve_target(name)
    validate_op_options(ops or tuple(OPS), op_options or {})  # bad op options fail here, before ranks spawn
    kwargs.pop("nproc", None)
    return SweepConfig(
        backend=backend, ops=ops or tuple(OPS), sizes=tuple(sizes), dtypes=dtypes or ("float32",),
        op_options=op_options or {}, command=shlex.join(["commbench", *sys.argv[1:]]), **kwargs,
    )  # fmt: skip


def default_nproc(backend: str) -> int:
    if backend == "nccl":
        import torch

        return max(1, torch.cuda.device_count())
    return 2


def start(cfg: SweepConfig, nproc: int | None) -> int:
    """Run in this process under torchrun or horovodrun, else spawn local ranks; returns the exit code."""
    from pathlib import Path

    from commbench.launch import launched_by_torchrun, spawn
    from commbench.launch_horovod import check_not_torchrun, launched_by_horovodrun, spawn_horovod
    from commbench.launchers import MPI_KINDS, detect_launch, export_torch_env
    from commbench.results import check_writable, default_output
    from commbench.worker import run_worker

    ctx = click.get_current_context(silent=True)
    launch = detect_launch(**{k: ctx.meta.get(k) for k in ("master_addr", "master_port") if ctx is not None})
    if launched_by_horovodrun():
        if nproc is not None:
            raise UserError("--nproc is for spawning local ranks; under horovodrun use -np instead")
        return run_worker(cfg)
    if launched_by_torchrun():
        check_not_torchrun(cfg.backend)
        if nproc is not None:
            raise UserError("--nproc is for spawning local ranks; under torchrun use --nproc_per_node instead")
        return run_worker(cfg)
    if launch.kind in ("slurm", *MPI_KINDS):  # one rank of srun or mpirun: torch's env:// variables from theirs
        if nproc is not None:
            raise UserError(f"--nproc is for spawning local ranks; under {launch.kind} the launcher's task count sets the ranks")
        export_torch_env(launch)
        return run_worker(cfg)
    nproc = default_nproc(cfg.backend) if nproc is None else nproc
    if nproc < 1:
        raise UserError(f"--nproc must be at least 1 (got {nproc})")
    path = Path(cfg.output) if cfg.output else default_output(cfg.backend, nproc)
    check_writable(path, cfg.overwrite)
    cfg.output = str(path.resolve())
    return (spawn_horovod if cfg.backend == "horovod" else spawn)(cfg, nproc, cfg.output)


# Reading results back (plot, report) and charting after a run (sweep, syncbn).
results_arguments = click.argument("csvs", nargs=-1, required=True, type=click.Path(path_type=Path))
chart_format_option = click.option("--format", "fmt", type=click.Choice(("png", "svg")), default="png",
                                   show_default=True, help="Chart file format.")
# Where a launcher (torchrun, horovodrun, mpirun) puts a rank's number: only rank 0 charts.
LAUNCHER_RANK_ENV = ("RANK", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
plot_option = click.option("--plot/--no-plot", default=True, show_default=True,
                           help="Write charts into <output stem>-charts/ beside the CSV when the run ends.")


def is_first_process() -> bool:
    """The launching process, or rank 0 under a launcher: the one process that charts a run."""
    return next((os.environ[v] for v in LAUNCHER_RANK_ENV if v in os.environ), "0") == "0"


def plot_after_run(cfg: SweepConfig, code: int, plot: bool) -> None:
    """Chart a finished run beside its CSV, from the launching process or rank 0 of a launcher only.

    Charts are a convenience on top of the CSV: a failure to draw them is a warning, and never
    changes the run's exit code. An interrupted or failed run (code > 1) is not charted.
    """
    # Spawned ranks never get here (the launcher does); under torchrun or horovodrun every rank
    # does, and only the first may write.
    if not plot or code not in (0, 1) or not is_first_process() or not cfg.output or not Path(cfg.output).exists():
        return
    from commbench.plotting import plot_beside

    try:
        paths = plot_beside(Path(cfg.output))
    except UserError as exc:
        click.echo(f"commbench: warning: no charts: {exc.format_message()}", err=True)
        return
    click.echo(f"# charts: {paths[0].parent}/ ({len(paths)} files)")
