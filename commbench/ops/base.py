"""The op contract: one collective pattern per module (nccl-tests' one-file-per-op shape).

An op module is the only place its facts live. Its class carries an `OpSpec` (name, summary, what
S is, the bus factor, variants, phases, the baseline of its speedup charts, the options it reads)
that `commbench list`, `--help`, the runner and the charts all read; the registry finds it by
scanning this package, so adding an op is adding one module. Op modules import torch lazily
(`commbench.lazy`), so reading specs never loads it.

At run time an op builds inputs with rank-dependent values whose result is known, issues its
collective calls through the backend (handing every wait object to the holder), and counts the
wrong elements afterwards. It never times itself: the harness owns the loop. An op whose
iteration is a fixed list of backend calls says so (calls()): the harness then binds them once
(prepare()) and its timed samples issue the transport's own functions and nothing else.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

from commbench.backends.copies import Copies, no_copies
from commbench.lazy import torch
from commbench.ops.options import OpOption
from commbench.units import format_size

if TYPE_CHECKING:
    from commbench.backends.base import Backend
    from commbench.ops.args import CollArgs


@dataclass(frozen=True)
class BusFactor:
    """busbw = algbw x factor(n), nccl-tests' normalisation; `text` is how `commbench list` shows it."""

    text: str
    factor: Callable[[int], float]

    def __call__(self, world_size: int) -> float:
        return self.factor(world_size)


GATHER_FACTOR = BusFactor("(n-1)/n", lambda n: (n - 1) / n)
REDUCE_FACTOR = BusFactor("2(n-1)/n", lambda n: 2 * (n - 1) / n)
UNIT_FACTOR = BusFactor("1", lambda n: 1.0)

# (latency coefficient A(p), bandwidth coefficient B(p)) of T(p, S) = A(p) alpha + B(p) S beta on p
# ranks, with S as the op defines it; a reduction's compute (gamma) is folded into the per-byte term.
Coefficients = Callable[[int], tuple[float, float]]


def lg(p: int) -> float:
    """ceil(log2 p): the rounds of a tree or recursive-doubling algorithm on p ranks (0 on one)."""
    return float(math.ceil(math.log2(p))) if p > 1 else 0.0


@dataclass(frozen=True)
class Cost:
    """The op's textbook cost model under each algorithm `commbench model` projects with (its
    --algorithm choices are this class's fields); None: the algorithm has no formula for the op."""

    ring: Coefficients | None = None
    tree: Coefficients | None = None

    def of(self, algorithm: str) -> Coefficients | None:
        return getattr(self, algorithm)


ALGORITHMS = tuple(f.name for f in fields(Cost))


@dataclass(frozen=True)
class OpSpec:
    """Everything about an op that is known without running it."""

    name: str
    summary: str
    s_definition: str
    bus_factor: BusFactor | None  # None: latency only (S = 0), algbw and busbw are left empty
    variants: tuple[str, ...]
    phases: tuple[str, ...] = ("comm",)
    # The variant the others are measured against in speedup charts; None: no speedup chart.
    baseline: str | None = None
    # The CSV column that says two rows did the same work (their x axis), and its name on charts:
    # S for most ops; the channel count for sync_bn, whose strategies move different bytes per layer.
    workload_column: str = "size_bytes"
    workload_name: str = "S"
    # The options that set the op's workload, named when a workload cannot fit in memory.
    workload_knobs: str = "--max-bytes or --sizes"
    options: tuple[OpOption, ...] = ()
    # How T scales with n for `commbench model`'s projections (docs/model.md lists the sources).
    cost: Cost = Cost()


@dataclass(frozen=True)
class Point:
    """One workload an op measures: how it is named, its S in bytes as requested, and the op's own
    parameters (a channel count, say). Used by the memory check, progress, the table and errors."""

    label: str
    size_bytes: int
    params: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def of_size(cls, size_bytes: int) -> Point:
        return cls(format_size(size_bytes), size_bytes)


@dataclass(frozen=True)
class Call:
    """One collective call of an op iteration: a backend collective method and its arguments, the
    same every iteration. `batch`: the method returns a list of wait objects (send_recv)."""

    method: Callable[..., Any]
    args: tuple[Any, ...]
    batch: bool = False


def bind_calls(args: CollArgs, calls: Sequence[Call]) -> Callable[[], None]:
    """An iteration's calls bound by the backend (Backend.bind), as one closure that issues them."""
    return args.prepared([(args.backend.bind(c.method, *c.args), c.batch) for c in calls])


def count_wrong(actual: Any, expected: Any, tolerance: tuple[float, float] | None = None) -> int:
    """Number of elements of actual that differ from expected (nccl-tests' #wrong).

    tolerance=(rtol, atol) is for results that are computed, not moved (e.g. sync_bn's normalised
    output against a float64 reference). By default inputs are small integers, so float32/64 and
    ints must match exactly, while half types may round partial sums of many ranks.
    """
    if actual.shape != expected.shape:
        return max(actual.numel(), expected.numel())
    return int(wrong_elements(actual, expected, tolerance).item())


def wrong_elements(actual: Any, expected: Any, tolerance: tuple[float, float] | None = None) -> Any:
    """count_wrong's count as a 0-dimensional int64 tensor on actual's device: summing such counts
    over chunks reads the device once, at the end. Shapes must match."""
    rtol, atol = tolerance or ({torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10}.get(expected.dtype, 0.0), 0.0)
    if not (rtol or atol):  # exact: compared as they are, without two float64 copies of a large result
        return (actual != expected).sum()
    return (~torch.isclose(actual.double(), expected.double(), rtol=rtol, atol=atol)).sum()


@dataclass(frozen=True)
class MemoryCase:
    """What an op's memory estimate depends on besides its point: all known before any rank starts."""

    world_size: int
    variant: str
    element_size: int  # bytes per element of the dtype
    window: int = 1  # ops issued per sample before they complete (the non-blocking window)
    copies: Copies = no_copies  # what the transport allocates in its calls (commbench.backends.copies)
    on_host: bool = True  # tensors in host memory, where the C allocator's heap keeps freed temporaries

    def transport(self, call: str, full_bytes: float, in_flight: int | None = None) -> int:
        """Bytes the transport allocates for `in_flight` (default: the window's) calls of one kind."""
        return self.copies(call, int(full_bytes), self.world_size, self.window if in_flight is None else in_flight)

    def heap_kept(self, temporaries: Sequence[float]) -> int:
        """Host bytes the C allocator may keep resident after these per-iteration temporaries are freed.

        glibc's malloc serves requests below its mmap threshold, which rises with use up to 32 MiB on
        64-bit hosts, from per-thread heaps that keep freed memory resident and fragment: temporaries
        of such sizes that come and go every iteration leave up to about twice their size resident
        (bench/memory.py, the bucketed reduce-scatters). Larger ones are unmapped when freed.
        """
        return int(2 * sum(t for t in temporaries if t < HEAP_LIMIT)) if self.on_host else 0


HEAP_LIMIT = 32 << 20


def elements_for(size_bytes: int, element_size: int, multiple: int) -> int:
    """The element count nearest to size_bytes that is a positive multiple of `multiple`."""
    units = max(1, round(size_bytes / element_size / multiple))
    return units * multiple


class Op(ABC):
    """One collective pattern. Subclasses set `spec` and fill in the abstract methods."""

    spec: ClassVar[OpSpec]
    # Derived from spec when a subclass sets one; a subclass may override them (test doubles do).
    name: ClassVar[str]
    variants: tuple[str, ...]
    phases: ClassVar[tuple[str, ...]]
    # Peak bytes per rank in units of S, for ops that do not override memory_bytes: a generous bound.
    memory_factor: ClassVar[float] = 4.0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "spec" in cls.__dict__:
            cls.name, cls.variants, cls.phases = cls.spec.name, cls.spec.variants, cls.spec.phases

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options = dict(options or {})

    def value(self, option: OpOption) -> Any:
        """The typed value of an option the op reads: as given (CLI, Python or a rank's JSON), or its default.

        Read in __init__, which runs before any rank starts, so a bad value is a one-line error."""
        return option.value(self.options.get(option.key))

    def unavailable(self, variant: str, backend: Backend) -> str | None:
        """Why a variant cannot run on this backend, or None when it can."""
        return None

    def dtype_unavailable(self, dtype: Any) -> str | None:
        """Why this op cannot run in dtype (a torch.dtype), or None when it can."""
        return None

    def world_error(self, world_size: int) -> str | None:
        """Why this op, with its options, cannot run on world_size ranks (a one-line message), or None.

        Checked before ranks are spawned where the launching process knows their number, and by
        the ranks themselves once they have joined."""
        return None

    def note(self, args: CollArgs) -> str:
        """What a reader of this case's row must know (a rank that sat out, realised splits); after setup()."""
        return ""

    def window_for(self, variant: str, window_per_sample: int) -> int:
        """Ops per timed sample: the non-blocking window, or 1 where the variant waits inside issue()."""
        return 1 if self.completes_internally(variant) else window_per_sample

    def completes_internally(self, variant: str) -> bool:
        """True when the variant waits for its own collectives inside issue() (a bucketer's flush,
        a layer that needs its gathered statistics), so non-blocking mode cannot overlap them."""
        return False

    def points(self, requested: Sequence[int]) -> list[Point]:
        """The workloads to measure; ops with a workload of their own return theirs."""
        return [Point.of_size(s) for s in requested]

    def memory_bytes(self, case: MemoryCase, point: Point) -> int:
        """Peak bytes per rank above the runtime that setting up and measuring this case reaches: the
        op's buffers, any copy it keeps, and what the transport allocates in its calls
        (case.transport). Estimated before anything is allocated, without torch."""
        return int(self.memory_factor * point.size_bytes)

    @abstractmethod
    def setup(self, args: CollArgs, point: Point) -> None:
        """Allocate args.input/output/expected for args.variant and set args.count (elements of S)."""

    @abstractmethod
    def fill(self, args: CollArgs) -> None:
        """Write the rank-dependent inputs and clear the outputs, so a stale result cannot pass the check."""

    def before(self, args: CollArgs, phase: str) -> None:
        """Untimed preparation before each timed sample (e.g. a forward pass before a timed backward)."""

    def calls(self, args: CollArgs, phase: str) -> list[Call] | None:
        """One iteration's collective calls, in order, when they are backend calls whose arguments are
        the same every iteration (after setup()); None, the default, when issue() does more than make
        them (packs buckets, concatenates, runs a layer), which is then what a timed sample runs."""
        return None

    def issue(self, args: CollArgs, phase: str) -> None:
        """Issue the collective calls of one iteration, passing each wait object to args.issue().

        By default: the calls(). An op whose calls() is None overrides this."""
        calls = self.calls(args, phase)
        if calls is None:
            raise NotImplementedError(f"{type(self).__name__} defines neither calls() nor issue()")
        for call in calls:
            args.issue(call.method(*call.args))

    def prepare(self, args: CollArgs, phase: str) -> Callable[[], None]:
        """One iteration for the timed loop, bound once (inside `with args.backend.binding()`).

        The calls() bound by the backend (bind_calls): the transport's functions with their
        arguments in place, counted when bound. Without calls(), or where a subclass overrides
        issue() (what it adds there is part of its iteration), issue() itself, which records its
        calls as it makes them."""
        calls = self.calls(args, phase) if type(self).issue is Op.issue else None
        if calls is None:
            return partial(self.issue, args, phase)
        return bind_calls(args, calls)

    @abstractmethod
    def wrong(self, args: CollArgs, phase: str) -> int:
        """Wrong elements on this rank after one checked iteration."""

    def size_bytes(self, args: CollArgs, phase: str) -> int:
        """S: the bytes one iteration moves, as the spec defines it.

        By default S is args.count elements (setup() counts them as the op defines S); ops whose
        S depends on the phase or variant override this.
        """
        return args.count * args.element_size

    def bus_factor(self, world_size: int) -> float | None:
        """busbw = algbw x this factor (nccl-tests' normalisation); None for a latency-only op."""
        return None if self.spec.bus_factor is None else self.spec.bus_factor(world_size)
