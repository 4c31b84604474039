"""The resolved configuration of one sweep: validated once, shipped to every rank as JSON."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields

from commbench.errors import UserError

DTYPES = ("float32", "float16", "bfloat16", "float64", "int32", "int64")
MODES = ("blocking", "nonblocking")


@dataclass
class SweepConfig:
    """Everything a rank needs to run a sweep. Validated in __post_init__ with actionable messages."""

    backend: str
    ops: tuple[str, ...]
    sizes: tuple[int, ...]
    dtypes: tuple[str, ...] = ("float32",)
    iters: int = 20
    warmup: int = 5
    mode: str = "blocking"
    window: int = 8
    check: bool = True
    output: str = ""
    overwrite: bool = False
    raw: bool = False
    timeout: float = 300.0
    op_options: dict[str, str] = field(default_factory=dict)
    command: str = ""

    def __post_init__(self) -> None:
        self.ops = tuple(self.ops)
        self.sizes = tuple(int(s) for s in self.sizes)
        self.dtypes = tuple(self.dtypes)
        if not self.ops:
            raise UserError("no op selected: pass --op NAME (see `commbench list`)")
        if not self.sizes or min(self.sizes) <= 0:
            raise UserError("sizes must be positive byte counts, e.g. --sizes 8,1K,4M")
        for dtype in self.dtypes:
            if dtype not in DTYPES:
                raise UserError(f"unknown dtype {dtype!r}; valid dtypes: {', '.join(DTYPES)}")
        if self.iters < 1:
            raise UserError(f"--iters must be at least 1 (got {self.iters})")
        if self.warmup < 0:
            raise UserError(f"--warmup cannot be negative (got {self.warmup})")
        if self.mode not in MODES:
            raise UserError(f"unknown mode {self.mode!r}; valid modes: {', '.join(MODES)}")
        if self.window < 1:
            raise UserError(f"--window must be at least 1 (got {self.window})")
        if not self.timeout > 0:
            raise UserError(f"--timeout must be a positive number of seconds (got {self.timeout})")

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "SweepConfig":
        data = json.loads(text)
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def fingerprint(self) -> dict[str, str]:
        """Per-option digests, compared across ranks to catch inconsistent launches.

        `output` and `command` legitimately differ per rank (only rank 0 writes), so they are left out.
        """
        data = asdict(self)
        return {
            key: hashlib.sha1(json.dumps(value, sort_keys=True).encode()).hexdigest()[:12]
            for key, value in data.items()
            if key not in ("output", "command")
        }
