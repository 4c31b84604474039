"""The resolved configuration of one sweep, and the ranks' agreement on it.

A SweepConfig is validated once, in the launching process, and shipped to every rank as JSON.
Before the first collective the ranks compare a digest of it, so a broken launch script that
hands ranks different options is caught with the name of the option that differs.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commbench.errors import UserError

if TYPE_CHECKING:
    from commbench.backends.base import Backend

# --iters auto: each (variant, phase, size) gets DEFAULT_TIME_PER_SIZE seconds of timed work, within
# [min, max] iterations, in DEFAULT_ROUNDS interleaved rounds. docs/measurement.md says how these
# were chosen.
DEFAULT_TIME_PER_SIZE = 0.02
DEFAULT_MIN_ITERS = 10
DEFAULT_MAX_ITERS = 1000
DEFAULT_ROUNDS = 3

DTYPES = ("float32", "float16", "bfloat16", "float64", "int32", "int64")
MODES = ("blocking", "nonblocking")


@dataclass(frozen=True)
class SweepConfig:
    """Everything a rank needs to run a sweep. Validated in __post_init__ with actionable messages."""

    backend: str
    ops: tuple[str, ...]
    sizes: tuple[int, ...]
    dtypes: tuple[str, ...] = ("float32",)
    iters: int | None = None  # None: auto, from the time budget
    warmup: int = 5
    min_iters: int = DEFAULT_MIN_ITERS
    max_iters: int = DEFAULT_MAX_ITERS
    time_per_size: float = DEFAULT_TIME_PER_SIZE
    rounds: int = DEFAULT_ROUNDS
    precision: float | None = None  # stop a row once its p50's interval is this narrow (relative width)
    mode: str = "blocking"
    window: int = 8
    check: bool = True
    output: str = ""  # as the user gave it; "" for the default name
    overwrite: bool = False
    raw: bool = False
    timeout: float = 300.0
    op_options: dict[str, str] = field(default_factory=dict)
    variants: tuple[str, ...] = ()  # --variant: only these, for each op that has any of them
    command: str = ""

    def __post_init__(self) -> None:
        for name in ("ops", "dtypes", "variants"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "sizes", tuple(int(s) for s in self.sizes))
        if not self.ops:
            raise UserError("no op selected: pass --op NAME (see `commbench list`)")
        if not self.sizes or min(self.sizes) <= 0:
            raise UserError("sizes must be positive byte counts, e.g. --sizes 8,1K,4M")
        for dtype in self.dtypes:
            if dtype not in DTYPES:
                raise UserError(f"unknown dtype {dtype!r}; valid dtypes: {', '.join(DTYPES)}")
        if self.iters is not None and self.iters < 1:
            raise UserError(f"--iters must be at least 1 or auto (got {self.iters})")
        if self.min_iters < 1:
            raise UserError(f"--min-iters must be at least 1 (got {self.min_iters})")
        if self.max_iters < self.min_iters:
            raise UserError(
                f"--max-iters ({self.max_iters}) is below --min-iters ({self.min_iters}); raise --max-iters"
            )
        if not self.time_per_size > 0:
            raise UserError(f"--time-per-size must be a positive number of seconds (got {self.time_per_size})")
        if self.rounds < 1:
            raise UserError(f"--rounds must be at least 1 (got {self.rounds})")
        if self.precision is not None and not 0 < self.precision < 1:
            raise UserError(f"--precision must lie between 0% and 100%, e.g. 2% (got {self.precision:.4g})")
        if self.warmup < 0:
            raise UserError(f"--warmup cannot be negative (got {self.warmup})")
        if self.mode not in MODES:
            raise UserError(f"unknown mode {self.mode!r}; valid modes: {', '.join(MODES)}")
        if self.window < 1:
            raise UserError(f"--window must be at least 1 (got {self.window})")
        if not self.timeout > 0:
            raise UserError(f"--timeout must be a positive number of seconds (got {self.timeout})")

    @property
    def auto(self) -> bool:
        """Iterations from the time budget (--iters auto) rather than a fixed count."""
        return self.iters is None

    @property
    def iterations_text(self) -> str:
        """How the iterations are chosen, for the run's header line."""
        rounds = f" in {self.rounds} interleaved rounds" if self.rounds > 1 else ""
        if self.iters is not None:
            return f"{self.iters} iters{rounds}"
        precision = f", or until the p50 is known to {self.precision:.3g}" if self.precision else ""
        return f"auto iters ({self.time_per_size:g} s per case{precision}, {self.min_iters}..{self.max_iters}){rounds}"

    @property
    def window_per_sample(self) -> int:
        """Ops issued per timed sample: --window in non-blocking mode, else 1."""
        return self.window if self.mode == "nonblocking" else 1

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SweepConfig:
        data = json.loads(text)
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def fingerprint(self) -> dict[str, str]:
        """Per-option digests, compared across ranks to catch inconsistent launches.

        `output` and `command` legitimately differ per rank (only rank 0 writes), so they are left out.
        """
        return {
            key: hashlib.sha1(json.dumps(value, sort_keys=True).encode()).hexdigest()[:12]
            for key, value in asdict(self).items()
            if key not in ("output", "command")
        }


@dataclass(frozen=True)
class Outcome:
    """How a run ended: its exit code, and the CSV it wrote (None where this process wrote none)."""

    code: int
    output: Path | None = None


@dataclass(frozen=True)
class RunFacts:
    """What every rank learns from the agreement: rank 0's run id, and where every rank runs."""

    run_id: str
    hosts: str
    node_ranks: str


class PeerError(Exception):
    """Another rank reported the error; it prints it, this rank exits quietly."""


def agree(backend: Backend, cfg: SweepConfig, error: str | None) -> RunFacts:
    """Compare the configuration across ranks, share any rank's refusal, and rank 0's run facts.

    An error found by one rank (its memory, rank 0's output file) stops every rank: the rank that
    found it raises a UserError with the message, the others a quiet PeerError.
    """
    mine = {
        "fingerprint": cfg.fingerprint(),
        "error": error,
        "node": backend.node_info(),
        "run_id": uuid.uuid4().hex[:12],
    }
    everyone = backend.all_gather_object(mine)
    if (message := _inconsistent(everyone)) is not None:
        if backend.rank == 0:  # one report, not one per rank
            raise UserError(message)
        raise PeerError(message)
    errors = [(e["node"]["rank"], e["error"]) for e in everyone if e["error"]]
    if errors:
        rank, message = errors[0]
        if rank == backend.rank:
            raise UserError(message)
        raise PeerError(message)
    nodes = [e["node"] for e in everyone]
    return RunFacts(
        run_id=everyone[0]["run_id"],
        hosts=";".join(sorted({n["host"] for n in nodes})),
        node_ranks=";".join(f"{n['rank']}@{n['host']}/{n['node_rank']}" for n in nodes),
    )


def _inconsistent(everyone: list[dict[str, Any]]) -> str | None:
    """Which options differ from rank 0's, and on which ranks; None when every rank agrees."""
    reference = everyone[0]["fingerprint"]
    odd: dict[str, list[int]] = {}
    for other in everyone[1:]:
        for option, digest in reference.items():
            if other["fingerprint"].get(option) != digest:
                odd.setdefault(option, []).append(other["node"]["rank"])
    if not odd:
        return None
    differs = "; ".join(
        f"{option} differs between rank 0 and rank{'s' if len(ranks) > 1 else ''} "
        f"{', '.join(map(str, ranks[:8]))}{' ...' if len(ranks) > 8 else ''}"
        for option, ranks in odd.items()
    )
    return f"ranks were launched with different options: {differs}; launch every rank with the same command"
