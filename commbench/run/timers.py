"""How a timed sample is read: a host clock on CPU, CUDA events on a GPU.

A timer marks the start and the stop of each sample of a block of samples, then reads them all
at once. The harness marks the start after its untimed barrier and the stop once every wait
object of the sample has been waited on.

- perf_counter (CPU backends): the device is synchronised and time.perf_counter() read at each
  mark (Backend.clock), so a sample never spans unfinished work.
- cuda_event (CUDA backends): each mark records a CUDA event on the current stream, where the
  collectives' wait objects make the stream wait for the communication. The device is not
  synchronised at either mark: the stop event completes on the GPU when the collective does, so
  neither a device synchronise nor the host's wake-up from one sits inside the sample. One
  synchronise on the last stop event, when the block is read, makes every event's time readable.
  Before the start event a short device-side delay is queued (LEAD_CYCLES of torch.cuda._sleep,
  untimed): the stream is idle after the untimed barrier, so without it the start event would fire
  at once and the sample would include the host's launch path of the collective (10-25 us through
  c10d); with it the collective is already queued when the start event fires, as in nccl-tests'
  back-to-back launches. What a sample still includes: each rank's skew leaving the barrier.

Which timer made a row is its `timer` column (TIMERS).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from commbench.backends.base import Backend

PERF_COUNTER, CUDA_EVENT = "perf_counter", "cuda_event"
TIMERS = (PERF_COUNTER, CUDA_EVENT)
# GPU clock cycles of the delay queued before each start event: about 50 us at an H100's or H200's
# 1.98 GHz (100 us at 1 GHz), longer than the launch path of a collective it hides.
LEAD_CYCLES = 100_000


class Timer(Protocol):
    """Marks samples of one block, then reads their durations."""

    name: str  # one of TIMERS, for the row's `timer` column

    def start(self) -> None:
        """Mark the start of a sample."""

    def stop(self) -> None:
        """Mark the end of the sample started last."""

    def read_us(self) -> list[float]:
        """Every sample marked since the last read, in microseconds and in order; forgets them."""


class PerfCounterTimer:
    """The host clock, read after the backend's device synchronise (Backend.clock)."""

    name = PERF_COUNTER

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._start = 0.0
        self._samples: list[float] = []

    def start(self) -> None:
        self._start = self._clock()

    def stop(self) -> None:
        self._samples.append((self._clock() - self._start) * 1e6)

    def read_us(self) -> list[float]:
        samples, self._samples = self._samples, []
        return samples


class CudaEventTimer:
    """A pair of timing CUDA events per sample, recorded on the current stream.

    event is the event class (torch.cuda.Event; a test hands in a fake): event(enable_timing=True)
    makes one, .record() records it on the current stream, .synchronize() waits for it, and
    start.elapsed_time(stop) is the milliseconds between two recorded events. At most `pending`
    pairs are kept: a stop that reaches it reads them then (after its own event, so outside any
    sample), which bounds the events alive in a long run to a few thousand. lead, when given, queues
    device work before each start event (timer_for: LEAD_CYCLES of torch.cuda._sleep).
    """

    name = CUDA_EVENT

    def __init__(self, event: Callable[..., Any], pending: int = 1024, lead: Callable[[], None] | None = None) -> None:
        self._event = event
        self._pending = pending
        self._lead = lead
        self._pairs: list[tuple[Any, Any]] = []
        self._read: list[float] = []
        self._start: Any = None

    def start(self) -> None:
        if self._lead is not None:
            self._lead()  # queued first: the start event fires once the collective is queued behind it
        self._start = self._event(enable_timing=True)
        self._start.record()

    def stop(self) -> None:
        if self._start is None:
            raise RuntimeError("CudaEventTimer.stop() without a start()")
        stop = self._event(enable_timing=True)
        stop.record()
        self._pairs.append((self._start, stop))
        self._start = None
        if len(self._pairs) >= self._pending:
            self._read += self._elapsed_us()

    def read_us(self) -> list[float]:
        samples, self._read = self._read + self._elapsed_us(), []
        return samples

    def _elapsed_us(self) -> list[float]:
        pairs, self._pairs = self._pairs, []
        if not pairs:
            return []
        # Events on one stream complete in order: once the last has, every earlier one has too.
        pairs[-1][1].synchronize()
        return [start.elapsed_time(stop) * 1e3 for start, stop in pairs]


def timer_for(backend: Backend) -> Timer:
    """CUDA events where the backend's tensors live on a GPU, else the synchronised host clock."""
    if backend.device.type == "cuda":
        import torch

        return CudaEventTimer(torch.cuda.Event, lead=cuda_lead())
    return PerfCounterTimer(backend.clock)


def cuda_lead(cycles: int = LEAD_CYCLES) -> Callable[[], None] | None:
    """The delay queued before each start event: torch.cuda._sleep (a spin kernel torch's own CUDA
    tests use), or None where this torch lacks it."""
    import torch

    sleep = getattr(torch.cuda, "_sleep", None)
    return None if sleep is None else lambda: sleep(cycles)
