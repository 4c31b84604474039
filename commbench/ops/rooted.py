"""What the rooted ops (broadcast, reduce, gather, scatter) share: the `--root` option.

One OpOption object, so the flag keeps one meaning across the four ops. The root is fixed for a
run (nccl-tests' `-r`): nothing rotates it between iterations.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from commbench.ops.base import CallsOp
from commbench.ops.options import OpOption, Whole

if TYPE_CHECKING:
    from commbench.backends.base import Backend
    from commbench.ops.args import CollArgs

ROOT = OpOption(
    "--root",
    "broadcast, reduce, gather, scatter: the rank that sends (broadcast, scatter) or receives (reduce, gather) "
    "the whole buffer, from 0 to n-1; fixed for the run.",
    Whole(0, "a rank", "a whole number from 0 to n-1"),
    default=0,
)


class RootedOp(CallsOp):
    """An op with one root rank: parsed when the op is built, checked against n once n is known."""

    collective: ClassVar[str]  # the Backend method it calls, which a transport may lack

    def unavailable(self, variant: str, backend: Backend) -> str | None:
        return backend.missing(self.collective)

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.root: int = self.value(ROOT)

    def world_error(self, world_size: int) -> str | None:
        if self.root >= world_size:
            return f"--root {self.root} is not one of the {world_size} ranks: give a rank from 0 to {world_size - 1}"
        return None

    def note(self, args: CollArgs) -> str:
        return f"root {self.root}" if self.root else ""
