"""What a node sweep found, as typed records: the verdict every rank reaches, its evidence, and its
JSON form (the verdict file, `--json`).

The records are what the sweep builds and what the console verdict, the chart and the benches read
back: a field that is renamed is renamed everywhere by the type checker, not by a search for a
string key. `to_json` and `Verdict.from_json` are the one place the file's shape is written down:
records become objects, pairs and triples (`Measured`) become lists, as the file always held them.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from commbench.isolate.verdict import Bar
from commbench.results.ownership import JSON_MARK, WRITTEN_BY


class Measured(NamedTuple):
    """A pair of nodes and one number about it (GB/s, or a link's ratio): [a, b, value] in the file."""

    a: str
    b: str
    value: float


@dataclass(frozen=True)
class Cut:
    """A robust bar as the verdict shows it: values below `cut` were low."""

    median: float
    mad: float
    margin: float
    cut: float

    @classmethod
    def of(cls, bar: Bar) -> Cut:
        return cls(bar.median, bar.mad, bar.margin, bar.cut)


@dataclass(frozen=True)
class RailCheck:
    """One rail of a confirmed suspect: its best re-measured pair on that rail against the slowest
    reference pair on the same rail, measured in the same phase."""

    rail: int
    best: float
    reference: float
    slow: bool


@dataclass(frozen=True)
class Evidence:
    """A suspect's confirmation: its re-measured pairs (best of the passes) and the reference pairs of
    healthy nodes beside them; per rail where the hosts have several."""

    pairs: list[Measured]
    references: list[Measured]
    rails: list[RailCheck] = field(default_factory=list)


@dataclass(frozen=True)
class Rail:
    """Local rank `rail` of `host`: its NIC where ranks are bound to one NIC each (a rail-optimised fabric)."""

    host: str
    rail: int


@dataclass(frozen=True)
class LevelFindings:
    """The pairs of one level (host pairs, or each host's local ranks) and what they show."""

    scores: dict[str, float]
    bar: Cut
    suspects: list[str]
    confirmations: dict[str, Evidence]
    link_bar: Cut | None
    link_suspects: list[Measured]  # [a, b, ratio]
    link_confirmations: dict[str, Evidence]  # by "a-b"
    pairs: list[Measured]  # every pair the screen measured, GB/s (the slowest rail's)
    flagged: list[str]
    flagged_links: list[tuple[str, str]]
    flagged_rails: list[Rail] = field(default_factory=list)
    flagged_ranks: list[int] = field(default_factory=list)  # local pairs: the global ranks flagged
    doubts: list[str] = field(default_factory=list)  # why the screen was widened, in order


@dataclass(frozen=True)
class ComputeSeconds:
    """The compute judge's wall time, the slowest rank's: the probe of every rank, the re-timings."""

    probe: float
    retimings: float


@dataclass(frozen=True)
class ComputeFindings:
    """The compute probe of every rank at once, and the re-timings of its suspects beside a reference."""

    gflops: dict[str, float]  # by rank name
    flops: float
    bar: Cut
    suspects: list[int]
    reference: int
    window_s: float
    samples: int
    seconds: ComputeSeconds
    beside_gflops: dict[str, list[tuple[float, float]]]  # by rank: (suspect, reference) per re-timing
    flagged: list[int]


@dataclass(frozen=True)
class BisectStep:
    """One step of the bisection: the two halves, their all_reduce p50s, and which way it went."""

    halves: list[list[str]]
    time_us_p50: list[float]
    result: str


@dataclass(frozen=True)
class RoundCount:
    """The rounds a sweep ran: the screen's host-pair rounds, the confirmations', the local pairs',
    the bisection's steps."""

    screen: int
    confirmation: int
    local: int = 0
    bisect: int = 0

    @property
    def host_pairs(self) -> int:
        """What the screen costs in host-pair rounds: its own and its confirmations'."""
        return self.screen + self.confirmation


@dataclass(frozen=True)
class Verdict:
    """Everything a node sweep found, with its evidence; what the verdict file holds."""

    hosts: list[str]
    ranks: dict[str, str]  # global rank -> host:local index
    size_bytes: int
    latency_bytes: int
    threshold: float
    k: float
    screen: str
    rounds: RoundCount
    rounds_used: int  # host-pair rounds: the screen's and its confirmations'
    round_seconds: list[float]  # wall time of every host-pair round, the slowest rank's
    host: LevelFindings
    local: LevelFindings | None
    compute: ComputeFindings
    bisect: list[BisectStep] | None
    flagged_hosts: list[str]
    flagged_links: list[tuple[str, str]]
    flagged_rails: list[Rail]
    flagged_ranks: list[int]
    wrong: int
    rails: bool = False  # whether each local rank was judged as a rail of its own
    csv: str | None = None

    @property
    def flagged(self) -> bool:
        return bool(self.flagged_hosts or self.flagged_links or self.flagged_rails or self.flagged_ranks)

    def to_json(self) -> dict[str, Any]:
        """The verdict file's document, led by the mark that makes it commbench's (results/ownership.py)."""
        import commbench

        return {JSON_MARK: f"{WRITTEN_BY} {commbench.__version__}", **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, data: Any) -> Verdict:
        """The verdict a file holds (its mark is not a field); ValueError (naming the field) when it is not one."""
        return _load(cls, data, "verdict")


def _load(kind: Any, data: Any, where: str) -> Any:
    """`data` (parsed JSON) as `kind`: records, named tuples, lists, tuples, dicts of str, optionals."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if data is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _load(inner, data, where)
    if dataclasses.is_dataclass(kind) or (
        isinstance(kind, type) and issubclass(kind, tuple) and hasattr(kind, "_fields")
    ):
        hints = typing.get_type_hints(kind)
        if isinstance(data, list) and hasattr(kind, "_fields"):
            data = dict(zip(kind._fields, data))
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected an object, got {type(data).__name__}")
        names = kind._fields if hasattr(kind, "_fields") else [f.name for f in dataclasses.fields(kind)]
        given = {n: _load(hints[n], data[n], f"{where}.{n}") for n in names if n in data}
        try:
            return kind(**given)
        except TypeError as exc:
            raise ValueError(f"{where}: {exc}") from None
    if origin in (list, tuple):
        if not isinstance(data, list):
            raise ValueError(f"{where}: expected a list, got {type(data).__name__}")
        if origin is list:
            return [_load(args[0], item, f"{where}[{i}]") for i, item in enumerate(data)]
        kinds = [args[0]] * len(data) if len(args) == 2 and args[1] is Ellipsis else list(args)
        if len(kinds) != len(data):
            raise ValueError(f"{where}: expected {len(kinds)} items, got {len(data)}")
        return tuple(_load(k, item, f"{where}[{i}]") for i, (k, item) in enumerate(zip(kinds, data)))
    if origin is dict:
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected an object, got {type(data).__name__}")
        return {str(key): _load(args[1], value, f"{where}.{key}") for key, value in data.items()}
    if kind is float and isinstance(data, (int, float)) and not isinstance(data, bool):
        return float(data)
    if kind in (int, str, bool) and type(data) is kind:
        return data
    if kind is Any:
        return data
    raise ValueError(f"{where}: expected {getattr(kind, '__name__', kind)}, got {type(data).__name__}")
