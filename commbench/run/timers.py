"""How a timed sample is read: a host clock on CPU, CUDA events on a GPU.

A timer marks the start and the stop of each sample of a block of samples, then reads them all
at once. The harness marks the start after its untimed barrier and the stop once every wait
object of the sample has been waited on; the marks are direct calls (marks()), and what they
return is kept after the stop (add()), so nothing but the mark itself sits inside a sample.

- perf_counter (CPU backends): time.perf_counter() read at each mark, the backend's host_clock():
  one clock read in host memory, else Backend.clock (the device synchronised first), so a sample
  never spans unfinished work.
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

Which timer made a row is its `timer` column (TIMERS, commbench/results/timing.py).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from commbench.results.timing import CUDA_EVENT, PERF_COUNTER

if TYPE_CHECKING:
    from commbench.backends.base import Backend

# GPU clock cycles of the delay queued before each start event: about 50 us at an H100's or H200's
# 1.98 GHz (100 us at 1 GHz), longer than the launch path of a collective it hides.
LEAD_CYCLES = 100_000


class Timer(Protocol):
    """Marks samples of one block, then reads their durations."""

    name: str  # one of TIMERS, for the row's `timer` column

    def marks(self) -> tuple[Callable[[], Any], Callable[[], Any]]:
        """The start and the stop mark of the next sample: each a direct call (a clock read, an event's
        record) that the harness makes at the sample's edges; what each returns goes to add()."""

    def add(self, start: Any, stop: Any) -> None:
        """Keep the sample the last marks() marked (start and stop: what its marks returned)."""

    def start(self) -> None:
        """Mark the start of a sample (marks() and its start mark in one call)."""

    def stop(self) -> None:
        """Mark the end of the sample started last, and keep it."""

    def read_us(self) -> list[float]:
        """Every sample marked since the last read, in microseconds and in order; forgets them."""


class PerfCounterTimer:
    """The host clock: the backend's clock, which synchronises its device, then reads time.perf_counter."""

    name = PERF_COUNTER

    def __init__(self, clock: Callable[[], float]) -> None:
        self._marks = (clock, clock)
        self._start = 0.0
        self._samples: list[float] = []

    def marks(self) -> tuple[Callable[[], float], Callable[[], float]]:
        return self._marks

    def add(self, start: float, stop: float) -> None:
        self._samples.append((stop - start) * 1e6)

    def start(self) -> None:
        self._start = self._marks[0]()

    def stop(self) -> None:
        self.add(self._start, self._marks[1]())

    def read_us(self) -> list[float]:
        samples, self._samples = self._samples, []
        return samples


class CudaEventTimer:
    """A pair of timing CUDA events per sample, recorded on the current stream.

    event is the event class (torch.cuda.Event; a test hands in a fake): event(enable_timing=True)
    makes one, .record() records it (on `stream()` when given, else the current stream),
    .synchronize() waits for it, and start.elapsed_time(stop) is the milliseconds between two
    recorded events. Events are reused once read, and a new one is recorded once when it is made,
    outside any sample, so a mark is only an event record: the CUDA event behind a torch.cuda.Event
    is created at its first record. At most `pending` pairs are kept: a sample's add() that reaches
    it reads them then (after the sample's stop, so outside any sample), which bounds the events
    alive in a long run to a few thousand. lead, when given, queues device work before each start
    event (timer_for: LEAD_CYCLES of torch.cuda._sleep), inside the start mark.
    """

    name = CUDA_EVENT

    def __init__(
        self,
        event: Callable[..., Any],
        pending: int = 1024,
        stream: Callable[[], Any] | None = None,
        lead: Callable[[], None] | None = None,
    ) -> None:
        self._event = event
        self._pending = pending
        self._stream = stream
        self._lead = lead
        self._free: list[Any] = []
        self._pairs: list[tuple[Any, Any]] = []
        self._read: list[float] = []
        self._marked: tuple[Any, Any] | None = None

    def _take(self) -> Any:
        if self._free:
            return self._free.pop()
        made = self._event(enable_timing=True)
        self._record(made)()
        return made

    def _record(self, event: Any) -> Callable[[], None]:
        return event.record if self._stream is None else partial(event.record, self._stream())

    def marks(self) -> tuple[Callable[[], None], Callable[[], None]]:
        self._marked = pair = (self._take(), self._take())
        start, stop = self._record(pair[0]), self._record(pair[1])
        if self._lead is None:
            return start, stop
        lead = self._lead

        def start_behind_lead() -> None:
            lead()  # queued first: the start event fires once the collective is queued behind it
            start()

        return start_behind_lead, stop

    def add(self, start: Any, stop: Any) -> None:
        if self._marked is None:
            raise RuntimeError("CudaEventTimer.stop() without a start()")
        self._pairs.append(self._marked)
        self._marked = None
        if len(self._pairs) >= self._pending:
            self._read += self._elapsed_us()

    def start(self) -> None:
        self.marks()[0]()

    def stop(self) -> None:
        if self._marked is None:
            raise RuntimeError("CudaEventTimer.stop() without a start()")
        self._record(self._marked[1])()
        self.add(None, None)

    def read_us(self) -> list[float]:
        samples, self._read = self._read + self._elapsed_us(), []
        return samples

    def _elapsed_us(self) -> list[float]:
        pairs, self._pairs = self._pairs, []
        if not pairs:
            return []
        # Events on one stream complete in order: once the last has, every earlier one has too.
        pairs[-1][1].synchronize()
        found = [start.elapsed_time(stop) * 1e3 for start, stop in pairs]
        self._free += [event for pair in pairs for event in pair]
        return found


def timer_for(backend: Backend) -> Timer:
    """CUDA events where the backend's tensors live on a GPU, else the synchronised host clock."""
    if backend.device.type == "cuda":
        import torch

        return CudaEventTimer(torch.cuda.Event, stream=torch.cuda.current_stream, lead=cuda_lead())
    return PerfCounterTimer(backend.host_clock())


def cuda_lead(cycles: int = LEAD_CYCLES) -> Callable[[], None] | None:
    """The delay queued before each start event: torch.cuda._sleep (a spin kernel torch's own CUDA
    tests use), or None where this torch lacks it."""
    import torch

    sleep = getattr(torch.cuda, "_sleep", None)
    return None if sleep is None else lambda: sleep(cycles)
