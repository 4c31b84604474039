"""The op contract: one collective pattern per module (nccl-tests' one-file-per-op shape).

An op module is the only place its facts live. Its class carries an `OpSpec` (commbench/ops/spec.py)
that `commbench list`, `--help`, the runner and the charts all read; the registry finds it by
scanning this package, so adding an op is adding one module. Beside this module: the spec
(spec.py), the cost model (cost.py), the memory model (memory.py) and the check (check.py).

At run time an op builds inputs with rank-dependent values whose result is known, issues its
collective calls through the backend (handing every wait object to the holder), and counts the
wrong elements afterwards. It never times itself: the harness owns the loop. An op says which
kind of iteration it has by its base: a CallsOp's iteration is a fixed list of backend calls
(calls()), which the harness binds once (prepare()) so that its timed samples issue the
transport's own functions and nothing else; an IssueOp's is its issue(), run as it is.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

from commbench.ops.memory import MemoryCase
from commbench.ops.options import OpOption
from commbench.ops.spec import OpSpec, Point

if TYPE_CHECKING:
    from commbench.backends.base import Backend
    from commbench.ops.args import CollArgs


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


class Op(ABC):
    """One collective pattern. An op derives from CallsOp or IssueOp, sets `spec` and fills in the
    abstract methods."""

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

    @abstractmethod
    def issue(self, args: CollArgs, phase: str) -> None:
        """Issue the collective calls of one iteration, passing each wait object to args.issue()."""

    @abstractmethod
    def prepare(self, args: CollArgs, phase: str) -> Callable[[], None]:
        """One iteration for the timed loop, bound once (inside `with args.backend.binding()`):
        CallsOp and IssueOp say how."""

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


class CallsOp(Op):
    """An op whose iteration is a fixed list of backend calls, the same arguments every iteration:
    calls() returns them, the harness binds them once per case (prepare) and its timed samples then
    call the transport's own functions and nothing else."""

    @abstractmethod
    def calls(self, args: CollArgs, phase: str) -> list[Call] | None:
        """One iteration's collective calls, in order (after setup()); None for a variant whose
        iteration does more than make them (concatenates tensors, say): that variant overrides
        issue(), which is then what a timed sample runs."""

    def issue(self, args: CollArgs, phase: str) -> None:
        calls = self.calls(args, phase)
        if calls is None:
            raise NotImplementedError(f"{type(self).__name__} defines neither calls() nor issue()")
        for call in calls:
            args.issue(call.method(*call.args))

    def prepare(self, args: CollArgs, phase: str) -> Callable[[], None]:
        """The calls() bound by the backend (bind_calls): the transport's functions with their
        arguments in place, counted when bound; issue() itself where calls() is None."""
        calls = self.calls(args, phase)
        if calls is None:
            return partial(self.issue, args, phase)
        return bind_calls(args, calls)


class IssueOp(Op):
    """An op whose iteration does more than fixed backend calls (packs buckets, concatenates tensors
    as part of its time, runs a layer): issue() issues through the backend, handing each wait object
    to args.issue(), and a timed sample runs issue() itself, whose calls are counted as they are made.
    A test double that changes a CallsOp's iteration derives from IssueOp first: class X(IssueOp, AllGather)."""

    def prepare(self, args: CollArgs, phase: str) -> Callable[[], None]:
        return partial(self.issue, args, phase)
