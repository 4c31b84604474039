"""The op contract: one collective pattern per module (nccl-tests' one-file-per-op shape).

An op declares its variants and phases, what S is and its bus factor, builds inputs with
rank-dependent values whose result is known, issues its collective calls through the backend
(handing every wait object to the holder), and counts the wrong elements afterwards. It never
times itself: the harness owns the loop.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar, Mapping, Sequence

import torch

if TYPE_CHECKING:
    from commbench.backends.base import Backend
    from commbench.harness import CollArgs

# Relative tolerance per dtype. Inputs are small integers, so float32/64 and ints must match
# exactly; half types may round partial sums of many ranks.
_RTOL = {torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10}


def count_wrong(actual: torch.Tensor, expected: torch.Tensor, tolerance: tuple[float, float] | None = None) -> int:
    """Number of elements of actual that differ from expected (nccl-tests' #wrong).

    tolerance=(rtol, atol) is for results that are computed, not moved (e.g. sync_bn's normalised
    output against a float64 reference); by default the per-dtype rule above applies.
    """
    if actual.shape != expected.shape:
        return max(actual.numel(), expected.numel())
    a, e = actual.double(), expected.double()
    rtol, atol = tolerance or (_RTOL.get(expected.dtype, 0.0), 0.0)
    ok = torch.isclose(a, e, rtol=rtol, atol=atol) if rtol or atol else a == e
    return int((~ok).sum().item())


def elements_for(size_bytes: int, element_size: int, multiple: int) -> int:
    """The element count nearest to size_bytes that is a positive multiple of `multiple`."""
    units = max(1, round(size_bytes / element_size / multiple))
    return units * multiple


class Op(ABC):
    """One collective pattern. Subclasses fill in the class attributes and the abstract methods."""

    name: ClassVar[str]
    variants: ClassVar[tuple[str, ...]]
    phases: ClassVar[tuple[str, ...]] = ("comm",)
    # Peak bytes this op holds per rank, in units of S: input, output and the expected result, plus
    # the temporaries fill() builds. Ops with another footprint set their own or override memory_bytes.
    memory_factor: ClassVar[float] = 4.0

    def __init__(self, options: Mapping[str, str] | None = None) -> None:
        self.options = dict(options or {})

    def unavailable(self, variant: str, backend: "Backend") -> str | None:
        """Why a variant cannot run on this backend, or None when it can."""
        return None

    def dtype_unavailable(self, dtype: torch.dtype) -> str | None:
        """Why this op cannot run in dtype, or None when it can."""
        return None

    def sizes(self, requested: Sequence[int]) -> Sequence[int]:
        """The sizes to measure; ops with a fixed workload return their own."""
        return requested

    def memory_bytes(self, size_bytes: int, world_size: int) -> int:
        """Estimated peak bytes per rank for a requested size, checked before anything is allocated."""
        return int(self.memory_factor * size_bytes)

    @abstractmethod
    def setup(self, args: "CollArgs", size_bytes: int) -> None:
        """Allocate args.input/output/expected for args.variant and set args.count (elements of S)."""

    @abstractmethod
    def fill(self, args: "CollArgs") -> None:
        """Write the rank-dependent inputs and clear the outputs, so a stale result cannot pass the check."""

    def before(self, args: "CollArgs", phase: str) -> None:
        """Untimed preparation before each timed sample (e.g. a forward pass before a timed backward)."""

    @abstractmethod
    def issue(self, args: "CollArgs", phase: str) -> None:
        """Issue the collective calls of one iteration, passing each wait object to args.issue()."""

    @abstractmethod
    def wrong(self, args: "CollArgs", phase: str) -> int:
        """Wrong elements on this rank after one checked iteration."""

    def size_bytes(self, args: "CollArgs", phase: str) -> int:
        """S: the bytes one iteration moves, as defined for this op in `commbench list`.

        By default S is args.count elements (setup() counts them as the op defines S); ops whose
        S depends on the phase or variant override this.
        """
        return args.count * args.element_size

    @abstractmethod
    def bus_factor(self, world_size: int) -> float:
        """busbw = algbw x this factor (nccl-tests' normalisation)."""
