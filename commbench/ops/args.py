"""What every Op method receives, and how what it issued completes.

`CollArgs` holds one case's collective arguments (backend, dtype, variant, the buffers the op set
up) and the wait objects its calls left outstanding. `wait_all` and `complete` are the one way to
finish them, for the harness's timed loop and for an op's own check alike (ops/barrier.py).

These live with the ops, not with the harness that drives them, so the ops depend on nothing above
themselves (docs/adding-an-op.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from commbench.lazy import torch

if TYPE_CHECKING:
    from commbench.backends.base import Backend, Work


@dataclass
class CollArgs:
    """Everything one collective call needs, plus the list of outstanding wait objects."""

    backend: Backend
    dtype: torch.dtype
    variant: str
    async_op: bool = True
    wait_objs: list[Work] = field(default_factory=list)
    count: int = 0
    input: Any = None
    output: Any = None
    expected: Any = None
    state: Any = None  # op-private (a bucketer, a module, ...)

    @property
    def rank(self) -> int:
        return self.backend.rank

    @property
    def world_size(self) -> int:
        return self.backend.world_size

    @property
    def device(self) -> torch.device:
        return self.backend.device

    @property
    def element_size(self) -> int:
        return torch.empty((), dtype=self.dtype).element_size()

    def issue(self, work: Work | list[Work]) -> None:
        """Keep an async op's wait object (or a batch's list of them) for complete(); wait at once otherwise."""
        for each in work if isinstance(work, list) else [work]:
            if self.async_op:
                self.wait_objs.append(each)
            else:
                each.wait()

    def prepared(self, bound: Sequence[tuple[Callable[[], Any], bool]]) -> Callable[[], None]:
        """One op iteration of bound calls (Backend.bind) as one closure that issues them in order and
        hands their wait objects over as issue() does, and does nothing else. Each call is paired
        with True when it returns a list of wait objects (a batch of transfers)."""
        one, many = (self.wait_objs.append, self.wait_objs.extend) if self.async_op else (_wait, _wait_each)
        steps = [(call, many if batch else one) for call, batch in bound]
        if len(steps) == 1:
            call, keep = steps[0]
            return lambda: keep(call())

        def iteration() -> None:
            for call, keep in steps:
                keep(call())

        return iteration


def _wait(work: Work) -> None:
    work.wait()


def _wait_each(works: list[Work]) -> None:
    for work in works:
        work.wait()


def wait_all(args: CollArgs) -> None:
    """Wait on every outstanding wait object (on CUDA, the current stream then waits for them)."""
    for work in args.wait_objs:
        work.wait()
    args.wait_objs.clear()


def complete(args: CollArgs) -> None:
    """Wait on every outstanding wait object, then let the device drain."""
    wait_all(args)
    args.backend.synchronize()
