"""Options shared by the commands, declared once (sqlite-utils' habit), and how the measuring
commands turn them into a validated configuration (commbench/cli/execute.py runs it)."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from commbench.backends import backends_help
from commbench.errors import UserError
from commbench.history.store import HISTORY_ENV
from commbench.redact import redact_argv
from commbench.run.config import DTYPES, Flag, SweepConfig

if TYPE_CHECKING:
    from commbench.launch.env import LaunchOptions

F = Callable[..., Any]


def config_option(name: str, help: str | None = None) -> Callable[[F], F]:
    """The option of SweepConfig's field `name`, built from the field: its default and type, its
    flag's help (or `help`, a command's own wording), short name and choices. The option is named
    as the field is, so build_config hands click's values to SweepConfig as they come."""
    spec = next(f for f in fields(SweepConfig) if f.name == name)
    flag: Flag = spec.metadata["flag"]
    text = help or flag.help
    long = "--" + name.replace("_", "-")
    if isinstance(spec.default, bool):  # a switch: --x/--no-x when it is on by default
        if spec.default:
            return click.option(f"{long}/--no-{long[2:]}", name, default=True, show_default=True, help=text)
        return click.option(long, name, is_flag=True, help=text)
    kind = click.Choice(flag.choices) if flag.choices else type(spec.default)
    names = [long, *([flag.short] if flag.short else []), name]
    return click.option(*names, type=kind, default=spec.default, show_default=True, help=text)


def _compose(*decorators: F) -> Callable[[F], F]:
    def apply(fn: F) -> F:
        for decorator in reversed(decorators):
            fn = decorator(fn)
        return fn

    return apply


def split_names(values: tuple[str, ...], flag: str) -> tuple[str, ...]:
    """A repeatable, comma-separated option's names in the order given, each once (a name given
    twice would measure, and write, the same rows twice). A value with no name in it (`--op ''`)
    is refused: it is a mistake, not a request for the default."""
    names = [v.strip() for value in values for v in value.split(",") if v.strip()]
    if any(not value.replace(",", "").strip() for value in values):
        raise UserError(f"{flag} is empty: name at least one, or leave {flag} out for the default")
    return tuple(dict.fromkeys(names))


def _split_csv(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    return split_names(values, param.opts[0])


def _iters(ctx: click.Context, param: click.Parameter, value: str) -> int | None:
    """--iters: "auto" (None) or a whole number; SweepConfig checks that it is at least 1."""
    if str(value).strip().lower() == "auto":
        return None
    try:
        return int(value)
    except ValueError:
        raise UserError(f"--iters takes a number of iterations or auto (got {value!r})") from None


def _fraction(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """A percentage ("2%") or a fraction ("0.02"); SweepConfig checks its range."""
    if value is None:
        return None
    text = value.strip()
    try:
        return float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise UserError(f"--{param.name} takes a percentage such as 2% (got {value!r})") from None


# Every command that writes a file replaces an existing one only when asked (commbench/results/paths.py).
overwrite_option = click.option(
    "--overwrite", is_flag=True, help="Replace existing output files instead of refusing (never an input)."
)

launch_options = _compose(
    click.option("--backend", default=None, help=backends_help()),
    click.option(
        "--nproc",
        type=int,
        default=None,
        help="Ranks to spawn when not under a launcher (default: 2 on CPU, every visible GPU with nccl or a Horovod built with NCCL).",
    ),
    click.option(
        "--oversubscribe",
        is_flag=True,
        help="Start more local ranks than 8 per core (refused by default: the timings would measure the scheduler).",
    ),
    click.option(
        "--output",
        "-o",
        default=None,
        help="CSV path, or a folder (ending in /) to put the default name in "
        "(default: results/<timestamp>-<backend>-n<world>-<tag>.csv).",
    ),
    overwrite_option,
    config_option("timeout"),
    click.option(
        "--master-addr",
        default=None,
        help="Under srun or mpirun: rank 0's host, reachable from every rank "
        "(default: MASTER_ADDR, else 127.0.0.1 on one host, else SLURM's first node).",
    ),
    click.option(
        "--master-port",
        type=click.IntRange(1, 65535),
        default=None,
        help="Under srun or mpirun: the rendezvous port (default: MASTER_PORT, else derived from the job id, else 29500).",
    ),
)


def pop_launch(options: dict[str, Any]) -> LaunchOptions:
    """What launch_options were given (--nproc, --master-addr, --master-port, --oversubscribe),
    taken out of a command's options (the rest go to build_config) for execute()."""
    from commbench.launch.env import LaunchOptions  # on use: `--help` does not load the launchers

    return LaunchOptions(
        options.pop("nproc"), options.pop("master_addr"), options.pop("master_port"), options.pop("oversubscribe")
    )


def budget_options(what: str, time_per_size: str | None = None, rounds: str | None = None) -> Callable[[F], F]:
    """--iters (its help: `what`), --time-per-size, --min-iters, --max-iters, --rounds: how many
    samples a measurement takes, in a command's own words where given."""
    return _compose(
        click.option("--iters", "-n", default="auto", show_default=True, callback=_iters, help=what),
        config_option("time_per_size", time_per_size),
        config_option("min_iters"),
        config_option("max_iters"),
        config_option("rounds", rounds),
    )


def precision_option(help: str) -> Callable[[F], F]:
    return click.option("--precision", default=None, callback=_fraction, help=help)


# How each sample is taken: after warm-up, blocking or a window of ops in flight, checked, where.
sample_options = _compose(
    config_option("warmup"),
    config_option("mode"),
    config_option("window"),
    config_option("check"),
    config_option("raw"),
    config_option("device"),
)

timing_options = _compose(
    click.option(
        "--dtype",
        "dtypes",
        multiple=True,
        callback=_split_csv,
        help=f"Element type, repeatable: {', '.join(DTYPES)} (default float32).",
    ),
    budget_options(
        "Timed iterations per (variant, phase, size): a number (1 to 1,000,000), or auto to fill --time-per-size."
    ),
    precision_option("Stop a row early once its mean's 95% interval is this narrow, e.g. 2% (within the budget)."),
    sample_options,
    config_option("overlap"),
    config_option("compute"),
    config_option("group"),
)


def history_location_option(what: str, dest: str = "location", *aliases: str) -> Callable[[F], F]:
    """--history PATH|URL, spelled and defaulted alike on every command (docs/history.md): the one
    location rule is commbench/history/store.py's history_location."""
    return click.option(
        "--history",
        *aliases,
        dest,
        default=None,
        envvar=HISTORY_ENV,
        help=f"{what}: a SQLite file, or a postgresql:// URL a team shares "
        f"(default: ${HISTORY_ENV}, else results/history.sqlite in the current folder, the same for every command).",
    )


# Where a run files itself (sweep, syncbn); docs/history.md.
history_options = _compose(
    history_location_option("History to file the run in", "history"),
    click.option("--no-history", is_flag=True, help="Do not file this run in a history."),
)

# Where a run's results go as Prometheus metrics once it completes (sweep, syncbn, replay; docs/metrics.md).
metrics_push_option = click.option(
    "--metrics-push",
    default=None,
    metavar="URL",
    help="Push the results to this Prometheus Pushgateway (http://host:9091) when the run completes; "
    "a failed push is a warning and exit code 6, the results kept.",
)
metrics_options = _compose(
    click.option(
        "--metrics-textfile",
        default=None,
        metavar="PATH",
        help="Write the results as Prometheus metrics to this .prom file (or commbench.prom in this folder) "
        "for node_exporter's textfile collector, when the run completes.",
    ),
    metrics_push_option,
)


def metrics_config(kwargs: dict[str, Any]) -> None:
    """--metrics-textfile and --metrics-push checked before any rank starts; the textfile planned
    with the run's outputs (the writing rule: results/outputs.py)."""
    from commbench.launch.env import detect
    from commbench.results.metrics_output import push_target, textfile_path

    if (textfile := kwargs.get("metrics_textfile")) is not None:
        # Only rank 0 writes it: another host's rank under a launcher need not have the folder.
        path = str(textfile_path(textfile, writer=detect(scontrol=False).rank == 0).absolute())
        kwargs["metrics_textfile"] = path
        kwargs["extra_outputs"] = [*kwargs.get("extra_outputs", ()), (path, "--metrics-textfile")]
    if kwargs.get("metrics_push") is not None:
        push_target(kwargs["metrics_push"], "")


# Reading results back (plot, report) and charting after a run (sweep, syncbn).
results_arguments = click.argument("csvs", nargs=-1, required=True, type=click.Path(path_type=Path))
chart_format_option = click.option(
    "--format", "fmt", type=click.Choice(("png", "svg")), default="png", show_default=True, help="Chart file format."
)
repeat_option = click.option(
    "--repeat",
    type=click.IntRange(1, 100),
    default=1,
    show_default=True,
    metavar="K",
    help="Launch the whole measurement K times, each with new ranks and a new rendezvous (as a CI job "
    "rerun would), into one CSV with a launch column; each launch is its own history run, and compare "
    "pools the K as one candidate (compare --plan 1.2x says which K; docs/history.md).",
)
plot_option = click.option(
    "--plot/--no-plot",
    default=True,
    show_default=True,
    help="Write charts into <output stem>-charts/ beside the CSV when the run ends.",
)


def build_config(
    *, ops: tuple[str, ...], sizes: list[int], backend: str | None, dtypes: tuple[str, ...], **kwargs: Any
) -> SweepConfig:
    """Validate what the user typed into a SweepConfig; every mistake is a one-line UserError."""
    from commbench.backends import check_backend, cuda_missing, default_backend
    from commbench.ops import build_ops, registry

    backend = backend or default_backend()
    check_backend(backend)
    if kwargs.get("device") == "cuda" and (reason := cuda_missing()) is not None:
        raise UserError(f"--device cuda needs a usable GPU: {reason}; use --device cpu")
    ops = ops or tuple(registry())
    built = build_ops(ops, kwargs.get("op_options", {}), kwargs.get("variants", ()))  # bad op options fail here
    from commbench.history.store import NO_HISTORY, history_location

    if kwargs.pop("no_history", False):
        kwargs["history"] = NO_HISTORY
    history_location(kwargs.get("history"))  # an unusable --history is refused before any rank starts
    metrics_config(kwargs)
    return SweepConfig(
        backend=backend,
        ops=ops,
        sizes=tuple(sizes),
        dtypes=dtypes or ("float32",),
        command=shlex.join(redact_argv(["commbench", *sys.argv[1:]])),
        **kwargs,
    ).with_ops(built)
