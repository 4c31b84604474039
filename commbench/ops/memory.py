"""An op's memory model: what its estimate of the peak bytes per rank depends on (`MemoryCase`),
known before any rank starts and computed without torch, so the launching process can check the
host before it starts a rank."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from commbench.backends.copies import Copies, no_copies


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
