"""The resolved configuration of one sweep.

A SweepConfig is validated once, in the launching process, and shipped to every rank as JSON;
the ranks then agree on it (commbench/run/agreement.py compares its option_digests() across ranks).
"""

from __future__ import annotations

import hashlib
import json
import weakref
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commbench.backends import BACKENDS
from commbench.errors import UserError
from commbench.results.budget import DEFAULT_MAX_ITERS, DEFAULT_MIN_ITERS, DEFAULT_TIME_PER_SIZE, DEFAULT_WARMUP, Budget
from commbench.results.outputs import OutputPlan, RunOutputs
from commbench.run.groups import GROUPS
from commbench.run.overlap import parse_compute

if TYPE_CHECKING:
    from commbench.ops.base import Op
    from commbench.ops.spec import Point

# --iters auto: the budget's samples (results/budget.py) in DEFAULT_ROUNDS interleaved rounds.
# docs/measurement.md says how these were chosen.
DEFAULT_ROUNDS = 3

# The rank program of a sweep (SweepConfig.program).
SWEEP_PROGRAM = "commbench.run.runner:run_sweep"

# Bytes per element of each dtype a sweep takes (torch-free, for memory estimates before a rank starts).
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int32": 4, "int64": 8}
DTYPES = tuple(DTYPE_BYTES)
DEVICES = ("auto", "cpu", "cuda")
MODES = ("blocking", "nonblocking")
# The ranges of the numeric options, checked once here (the CLI, the launcher and every rank build
# a SweepConfig). --iters and --warmup: each rank keeps a sample per iteration and sends them all
# in one message per case. --window: wait objects in flight at once. --timeout: the rendezvous
# store and Gloo count whole milliseconds and a rank needs a moment to connect, so under a second
# a sweep cannot start; a collective still running after a week has hung.
ITERS_RANGE = (1, 1_000_000)
WARMUP_RANGE = (0, 1_000_000)
WINDOW_RANGE = (1, 1024)
# --time-per-size: under a millisecond every case sits at --min-iters; an hour per case is a typo.
TIME_PER_SIZE_RANGE_S = (0.001, 3600.0)
ROUNDS_RANGE = (1, 1000)
TIMEOUT_RANGE_S = (1.0, 7 * 24 * 3600.0)
# A run of one rank is legal (nccl-tests allows it), but nothing crosses a link: the warning before
# it starts, the printed header and every row's note say so.
ONE_RANK_NOTE = "a single rank measures a local copy, not communication"


@dataclass(frozen=True)
class Flag:
    """How a SweepConfig field is given on the command line, stated beside its default: the CLI
    builds the option from the field (cli/options.py's config_option), named as the field is."""

    help: str
    short: str | None = None
    choices: tuple[str, ...] | None = None


def option(default: Any, help: str, short: str | None = None, choices: tuple[str, ...] | None = None) -> Any:
    """A field that is also a command-line option: its default, once, and its flag."""
    return field(default=default, metadata={"flag": Flag(help, short, choices)})


@dataclass(frozen=True)
class SweepConfig:
    """Everything a rank needs to run a sweep. Validated in __post_init__ with actionable messages."""

    backend: str
    ops: tuple[str, ...]
    sizes: tuple[int, ...]
    dtypes: tuple[str, ...] = ("float32",)
    iters: int | None = None  # None: auto, from the time budget
    warmup: int = option(
        DEFAULT_WARMUP,
        "Untimed iterations per size, 0 to 1,000,000 (with --iters auto at most this many, at least 1).",
        "-w",
    )
    min_iters: int = option(DEFAULT_MIN_ITERS, "With --iters auto: at least this many.")
    max_iters: int = option(DEFAULT_MAX_ITERS, "With --iters auto: at most this many.")
    time_per_size: float = option(
        DEFAULT_TIME_PER_SIZE, "With --iters auto: seconds of timed work per (variant, phase, size)."
    )
    rounds: int = option(
        DEFAULT_ROUNDS,
        "Visit every (variant, phase, size) this many times in rotation, each visit a block of its iterations.",
    )
    precision: float | None = None  # stop a row once its mean's interval is this narrow (relative width)
    mode: str = option(
        "blocking",
        "blocking: barrier, then time issue+wait of one op; nonblocking: issue --window ops, wait all, time / window.",
        choices=MODES,
    )
    window: int = option(8, "Ops in flight per sample in nonblocking mode (1 to 1024).")
    check: bool = option(True, "Verify every result and count wrong elements.")
    output: str | None = None  # as the user gave it; None for the default name
    overwrite: bool = False
    raw: bool = option(False, "Also write per-iteration, per-rank samples to <output>.raw.csv.")
    timeout: float = option(300.0, "Seconds a collective may take before the rank ends with a diagnosis (1 to 604800).")
    op_options: dict[str, Any] = field(default_factory=dict)  # typed values (OpOption.value), JSON-able
    variants: tuple[str, ...] = ()  # --variant: only these, for each op that has any of them
    group: str = option(  # commbench/run/groups.py
        "world",
        "Ranks each op runs among: world (all), intra (one group per host, all groups at once), "
        "inter (one group per local rank index, across hosts).",
        choices=GROUPS,
    )
    device: str = option(  # the other backends choose their own
        "auto", "Where gloo's tensors live: cpu (auto), or cuda to measure Gloo on GPU tensors.", choices=DEVICES
    )
    overlap: bool = option(  # run/overlap.py
        False,
        "Also time a matmul alone and the op with the matmul run while it is in flight, and report how "
        "much of the shorter one was hidden (columns comm_us, compute_us, overlapped_us, overlap; docs/overlap.md).",
    )
    compute: str = option(
        "auto",
        "With --overlap: the matmul's FLOP count (e.g. 1G, 5e9), or auto (about as long as the op at each size).",
    )
    command: str = ""
    # sweep --repeat K (launch/start.py): which launch this is (0: a single run), the id the K
    # launches share, and whether this launch appends to the CSV the first one created.
    launch: int = 0
    launch_group: str = ""
    append: bool = False
    history: str | None = (
        None  # --history PATH|URL; history/store.py's NO_HISTORY under --no-history; None: the default (history_location)
    )
    # What each rank runs once it has joined the process group, as `module:function` taking
    # (cfg, launch, backend): the sweep, or another program on the same launch (`commbench isolate`
    # names its node sweep), with that program's own options (JSON-able) in program_options.
    program: str = SWEEP_PROGRAM
    program_options: dict[str, Any] = field(default_factory=dict)
    # The digest of what the run's workload was read from (`commbench replay`'s traces), part of the
    # run's fingerprint: "" for a sweep, whose workload is its options.
    workload_digest: str = ""
    # The one writing rule's facts (commbench/results/outputs.py): the files the program's rank 0
    # writes beside the CSV (paths.beside's suffixes; "-charts/" a folder), and the files the run reads.
    side_files: tuple[str, ...] = ()
    inputs: tuple[str, ...] = ()
    # (path, flag) of the files the command writes itself once the run ends (--json): planned and
    # claimed with the run's outputs by the process that plans them (the spawner, or rank 0).
    extra_outputs: tuple[tuple[str, str], ...] = ()
    # --metrics-textfile (an absolute .prom path) and --metrics-push (a Pushgateway URL): where rank 0
    # delivers the run's metrics when it completes (results/metrics_output.py).
    metrics_textfile: str | None = None
    metrics_push: str | None = None

    def __post_init__(self) -> None:
        for name in ("ops", "dtypes", "variants", "side_files", "inputs"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "extra_outputs", tuple((str(p), str(f)) for p, f in self.extra_outputs))
        object.__setattr__(self, "sizes", tuple(int(s) for s in self.sizes))
        if not self.ops:
            raise UserError("no op selected: pass --op NAME (see `commbench list`)")
        if not self.sizes or min(self.sizes) <= 0:
            raise UserError("sizes must be positive byte counts, e.g. --sizes 8,1K,4M")
        for dtype in self.dtypes:
            if dtype not in DTYPES:
                raise UserError(f"unknown dtype {dtype!r}; valid dtypes: {', '.join(DTYPES)}")
        if self.iters is not None:
            in_range("--iters", self.iters, ITERS_RANGE)
        in_range("--min-iters", self.min_iters, ITERS_RANGE)
        in_range("--max-iters", self.max_iters, ITERS_RANGE)
        if self.max_iters < self.min_iters:
            raise UserError(
                f"--max-iters ({self.max_iters}) is below --min-iters ({self.min_iters}); raise --max-iters"
            )
        in_range("--time-per-size", self.time_per_size, TIME_PER_SIZE_RANGE_S, "seconds")
        in_range("--rounds", self.rounds, ROUNDS_RANGE)
        if self.precision is not None and not 0 < self.precision < 1:
            raise UserError(
                f"--precision must be more than 0% and less than 100%, such as 2% (got {self.precision * 100:g}%)"
            )
        in_range("--warmup", self.warmup, WARMUP_RANGE)
        if self.mode not in MODES:
            raise UserError(f"unknown mode {self.mode!r}; valid modes: {', '.join(MODES)}")
        in_range("--window", self.window, WINDOW_RANGE)
        if self.group not in GROUPS:
            raise UserError(f"unknown group {self.group!r}; valid groups: {', '.join(GROUPS)}")
        in_range("--timeout", self.timeout, TIMEOUT_RANGE_S, "seconds")
        object.__setattr__(self, "compute", parse_compute(self.compute))
        if self.device not in DEVICES:
            raise UserError(f"unknown device {self.device!r}; valid devices: {', '.join(DEVICES)}")
        if self.device != "auto" and self.backend in BACKENDS and not BACKENDS[self.backend].places_tensors:
            chosen = ", ".join(name for name, info in BACKENDS.items() if info.places_tensors)
            raise UserError(f"--device applies to --backend {chosen} only; {self.backend} places its own tensors")

    @property
    def auto(self) -> bool:
        """Iterations from the time budget (--iters auto) rather than a fixed count."""
        return self.iters is None

    @property
    def budget(self) -> Budget:
        """The iteration budget every case of the sweep is sized by."""
        return Budget(self.time_per_size, self.min_iters, self.max_iters, self.iters, self.warmup)

    @property
    def iterations_text(self) -> str:
        """How the iterations are chosen, for the run's header line."""
        rounds = f" in {self.rounds} interleaved rounds" if self.rounds > 1 else ""
        if self.iters is not None:
            return f"{self.iters} iters{rounds}"
        precision = f", or until the mean is known to {self.precision:.3g}" if self.precision else ""
        return f"auto iters ({self.time_per_size:g} s per case{precision}, {self.min_iters}..{self.max_iters}){rounds}"

    def built_ops(self) -> list[Op]:
        """The selected ops, built once per configuration (a process builds its configuration once:
        the launcher's checks and an in-process rank share these). Building checks --op-option and
        --variant."""
        built = self.__dict__.get("_built_ops")
        if built is None:
            from commbench.ops import build_ops

            built = build_ops(self.ops, self.op_options, self.variants)
            self.with_ops(built)
        return built

    def with_ops(self, ops: list[Op]) -> SweepConfig:
        """This configuration, holding ops already built from it (the CLI builds them to check the options)."""
        object.__setattr__(self, "_built_ops", ops)
        return self

    @property
    def window_per_sample(self) -> int:
        """Ops issued per timed sample: --window in non-blocking mode, else 1."""
        return self.window if self.mode == "nonblocking" else 1

    def outputs(self) -> RunOutputs:
        """What this run writes and reads, for the plan of its outputs (results/outputs.py)."""
        from commbench.history.store import history_file

        return RunOutputs(
            self.output,
            self.overwrite,
            self.raw,
            self.side_files,
            self.extra_outputs,
            self.inputs,
            history_file(self.history),
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SweepConfig:
        data = json.loads(text)
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def option_digests(self) -> dict[str, str]:
        """Per-option digests, compared across ranks to catch inconsistent launches.

        `output`, `command`, `history`, `inputs`, `extra_outputs` and the metrics' targets legitimately
        differ per rank (only rank 0 writes; each rank names its files from its own folder), so they
        are left out.
        """
        return {
            key: hashlib.sha1(json.dumps(value, sort_keys=True).encode()).hexdigest()[:12]
            for key, value in asdict(self).items()
            if key
            not in ("output", "command", "history", "inputs", "extra_outputs", "metrics_textfile", "metrics_push")
        }


def in_range(flag: str, value: float, bounds: tuple[float, float], unit: str = "") -> None:
    """Refuse a value outside [low, high] (NaN and infinities included) in one line naming the range."""
    low, high = bounds
    if not low <= value <= high:  # False for NaN
        shown = [f"{x:,}" if isinstance(x, int) else f"{x:g}" for x in (low, high, value)]
        raise UserError(
            f"{flag} must be between {shown[0]} and {shown[1]}{' ' + unit if unit else ''} (got {shown[2]})"
        )


@dataclass(frozen=True)
class Outcome:
    """How a run ended: its exit code, the CSV it wrote (None where this process wrote none), and
    the plan of its outputs where this process made it (its claims are the caller's to release)."""

    code: int
    output: Path | None = None
    outputs: OutputPlan | None = None


# Each op instance's points, by the sizes asked for: worked out once per op (and ops are built once
# per process), however many of the memory check, the plan and the rotation ask.
_POINTS: weakref.WeakKeyDictionary[Op, dict[tuple[int, ...], list[Point]]] = weakref.WeakKeyDictionary()


def op_points(op: Op, sizes: Sequence[int]) -> list[Point]:
    """op.points(sizes), worked out on the first call for this op and these sizes."""
    mine = _POINTS.setdefault(op, {})
    key = tuple(sizes)
    if key not in mine:
        mine[key] = op.points(key)
    return mine[key]
