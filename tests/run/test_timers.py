"""The timers on CPU: CUDA events faked on a fake GPU timeline, the host clock faked, and the
harness's timed loop wired to whichever the backend's device calls for."""

from __future__ import annotations

import contextlib
import functools
import time
from collections import Counter
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from commbench.backends.base import Binding
from commbench.ops.args import CollArgs
from commbench.results.reader import read_one
from commbench.results.schema import COLUMNS
from commbench.results.timing import CUDA_EVENT, PERF_COUNTER
from commbench.run.harness import measure
from commbench.run.timers import (
    LEAD_CYCLES,
    CudaEventTimer,
    PerfCounterTimer,
    cuda_lead,
    timer_for,
)

# Depends on torch's API: CI runs it again on the oldest torch it tests (.ci/run, -m torch_api).
pytestmark = pytest.mark.torch_api


class Gpu:
    """A fake device timeline: a stream position in milliseconds and the synchronizes asked of it."""

    def __init__(self) -> None:
        self.now_ms = 0.0
        self.synchronized = 0

    def event(self, enable_timing: bool = False) -> FakeEvent:
        return FakeEvent(self, enable_timing)


class FakeEvent:
    """torch.cuda.Event's timing surface: record() stamps the stream position; elapsed_time() in ms."""

    def __init__(self, gpu: Gpu, enable_timing: bool) -> None:
        self.gpu, self.enable_timing, self.at_ms, self.stream = gpu, enable_timing, None, None

    def record(self, stream: Any = None) -> None:
        self.at_ms, self.stream = self.gpu.now_ms, stream

    def synchronize(self) -> None:
        self.gpu.synchronized += 1

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.enable_timing and end.enable_timing, "elapsed_time needs timing events"
        assert self.at_ms is not None and end.at_ms is not None, "both events must be recorded"
        return end.at_ms - self.at_ms


def test_the_lead_in_delay_is_queued_before_the_start_event() -> None:
    """On an idle stream the start event would fire at once, before the host has launched the
    collective: the delay is queued first, so the sample starts when the delay ends."""
    gpu, order = Gpu(), []

    def lead() -> None:
        order.append("lead")
        gpu.now_ms += 0.05

    class Recorded(FakeEvent):
        def record(self, stream: Any = None) -> None:
            order.append("record")
            super().record(stream)

    timer = CudaEventTimer(lambda enable_timing=False: Recorded(gpu, enable_timing), lead=lead)
    timer.start()
    gpu.now_ms += 0.02
    timer.stop()
    # Two new events recorded once when made (outside the sample), then the delay, the start, the stop.
    assert order == ["record", "record", "lead", "record", "record"]
    assert timer.read_us() == pytest.approx([20.0])


def test_the_lead_is_torch_cuda_sleep_where_torch_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(torch.cuda, "_sleep", calls.append)
    lead = cuda_lead()
    assert lead is not None
    lead()
    assert calls == [LEAD_CYCLES]
    monkeypatch.delattr(torch.cuda, "_sleep")
    assert cuda_lead() is None


def test_cuda_events_give_each_sample_its_stream_time_in_us_after_one_synchronize() -> None:
    gpu = Gpu()
    timer = CudaEventTimer(gpu.event)
    for work_ms in (0.004, 0.25, 3.0):
        gpu.now_ms += 1.0  # untimed work (the barrier) between samples
        timer.start()
        gpu.now_ms += work_ms
        timer.stop()
    assert gpu.synchronized == 0  # marking a sample never waits for the device
    assert timer.read_us() == pytest.approx([4.0, 250.0, 3000.0])
    assert gpu.synchronized == 1
    assert timer.read_us() == [] and gpu.synchronized == 1  # read forgets; an empty read waits for nothing


def test_a_long_block_is_read_in_batches_between_samples() -> None:
    """A million iterations would hold two million events: every `pending` samples are read at a stop."""
    gpu = Gpu()
    timer = CudaEventTimer(gpu.event, pending=2)
    synchronized_at_stop = []
    for i in range(5):
        timer.start()
        gpu.now_ms += 0.001 * (i + 1)
        timer.stop()
        synchronized_at_stop.append(gpu.synchronized)
    assert synchronized_at_stop == [0, 1, 1, 2, 2]
    assert timer.read_us() == pytest.approx([1.0, 2.0, 3.0, 4.0, 5.0])
    assert gpu.synchronized == 3 and timer.read_us() == []


def test_cuda_marks_are_event_records_on_the_given_stream_and_events_are_reused_once_read() -> None:
    gpu, made = Gpu(), []

    def event(enable_timing: bool = False) -> FakeEvent:
        made.append(FakeEvent(gpu, enable_timing))
        return made[-1]

    timer = CudaEventTimer(event, stream=lambda: "stream 7")
    for _ in range(2):
        for work_ms in (0.002, 0.003):
            start, stop = timer.marks()  # events taken (and made) here, before the sample
            gpu.now_ms += 1.0
            began = start()
            gpu.now_ms += work_ms
            timer.add(began, stop())
        assert timer.read_us() == pytest.approx([2.0, 3.0])
    assert len(made) == 4  # two samples' pairs, made for the first block and reused for the second
    assert {e.stream for e in made} == {"stream 7"}


def test_a_stop_without_a_start_is_a_bug_not_a_sample() -> None:
    timer = CudaEventTimer(Gpu().event)
    with pytest.raises(RuntimeError, match="without a start"):
        timer.stop()


def test_the_host_clock_is_read_at_each_mark() -> None:
    readings = iter([10.0, 10.5, 11.0, 11.000002])
    timer = PerfCounterTimer(lambda: next(readings))
    for _ in range(2):
        timer.start()
        timer.stop()
    assert timer.read_us() == pytest.approx([500_000.0, 2.0])
    assert timer.read_us() == []


def test_a_cpu_transport_marks_with_one_clock_read_even_where_it_overrides_synchronize() -> None:
    from commbench.backends.gloo import GlooBackend

    cpu = GlooBackend("cpu")  # GlooBackend.synchronize drains a GPU only
    assert cpu.host_clock() is time.perf_counter
    on_gpu = GlooBackend("cuda")
    on_gpu.device = torch.device("cuda", 0)  # set by init() on a GPU machine; no GPU is touched here
    assert on_gpu.host_clock() == on_gpu.clock  # synchronise, then read


@pytest.mark.parametrize("device, kind", [("cuda", CudaEventTimer), ("cpu", PerfCounterTimer)])
def test_the_backend_device_chooses_the_timer(device: str, kind: type) -> None:
    backend = SimpleNamespace(device=torch.device(device), host_clock=lambda: lambda: 0.0)
    timer = timer_for(backend)
    assert isinstance(timer, kind) and timer.name == {"cuda": CUDA_EVENT, "cpu": PERF_COUNTER}[device]


class FakeCudaBackend:
    """What measure() asks of a backend, on a fake GPU whose host clock must never be read."""

    def __init__(self, gpu: Gpu) -> None:
        self.gpu = gpu
        self.device = torch.device("cuda", 0)
        self.calls: Counter[str] = Counter()
        self.issued = 0
        self.barriers = 0
        self.world_size = 1  # the bus factor of the row asks for it

    @contextlib.contextmanager
    def binding(self) -> Iterator[Binding]:
        yield Binding()

    def synchronize(self) -> None:
        self.gpu.synchronized += 1

    def barrier(self) -> None:
        self.barriers += 1

    def clock(self) -> float:
        raise AssertionError("a CUDA backend's samples must come from events, not the host clock")

    def all_gather_object(self, obj: Any) -> list[Any]:
        return [obj]

    def reduce_floats(self, values: list[float], op: str) -> list[float]:
        return list(values)  # one rank: its own values are the max and the sum


class StreamWork:
    """A wait object whose wait() makes the (fake) current stream wait for the collective."""

    def __init__(self, gpu: Gpu, ms: float) -> None:
        self.gpu, self.ms = gpu, ms

    def wait(self) -> None:
        self.gpu.now_ms += self.ms


class FakeOp:
    """One call of a known stream duration per issue; the ith timed sample takes (i + 1) x 10 us per op."""

    def __init__(self, gpu: Gpu) -> None:
        self.gpu, self.issued = gpu, 0

    def fill(self, args: CollArgs) -> None:
        pass

    def before(self, args: CollArgs, phase: str) -> None:
        self.gpu.now_ms += 5.0  # untimed preparation on the stream

    def prepare(self, args: CollArgs, phase: str) -> Callable[[], None]:
        return functools.partial(self.issue, args, phase)

    def issue(self, args: CollArgs, phase: str) -> None:
        args.backend.calls["fake"] += 1
        args.issue(StreamWork(self.gpu, 0.01 * (self.issued // args.state + 1)))
        self.issued += 1

    def wrong(self, args: CollArgs, phase: str) -> int:
        return 0

    # What the measurement record names the case by.
    name = "fake"

    def size_bytes(self, args: CollArgs, phase: str) -> int:
        return 0

    def bus_factor(self, world_size: int) -> None:
        return None


@pytest.mark.parametrize("window", [1, 4])
def test_measure_on_cuda_times_with_events_and_synchronizes_outside_the_samples(
    window: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    gpu = Gpu()
    monkeypatch.setattr(torch.cuda, "Event", gpu.event)
    slept: list[int] = []

    def sleep(cycles: int) -> None:  # the lead-in delay: 50 us of stream time, queued before the start event
        slept.append(cycles)
        gpu.now_ms += 0.05

    monkeypatch.setattr(torch.cuda, "_sleep", sleep)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: "the current stream")
    backend = FakeCudaBackend(gpu)
    args = CollArgs(backend=backend, dtype=torch.float32, variant="flat", state=window)  # type: ignore[arg-type]
    watchdog = SimpleNamespace(arm=lambda label: None, disarm=lambda: None)
    m = measure(FakeOp(gpu), args, "comm", iters=3, warmup=0, window=window, check=False, watchdog=watchdog, label="x")
    assert m.timer == CUDA_EVENT
    assert m.samples_us == pytest.approx([10.0, 20.0, 30.0])  # per op: the sample's stream time / window
    assert slept == [LEAD_CYCLES] * 3  # one delay per sample, none of it inside the sample
    assert m.calls == 1 and m.apis == "fake"
    # One untimed synchronize before each sample's barrier, one to read the block: none inside a sample.
    assert backend.barriers == 3 and gpu.synchronized == 3 + 1


def test_the_timer_column_is_written_and_older_files_read_as_perf_counter(tmp_path: Any) -> None:
    assert "timer" in COLUMNS
    old = tmp_path / "old.csv"
    columns = [c for c in COLUMNS if c != "timer"]
    values = {"schema_version": "1", "run_id": "r", "op": "all_gather", "variant": "flat", "phase": "comm"}
    values.update(dtype="float32", mode="blocking", size_bytes="8", world_size="2", backend="gloo", status="ok")
    values.update({c: "1" for c in ("time_us_min", "time_us_p50", "time_us_p95", "time_us_max", "time_us_std")})
    values["busbw_gbps"] = "0.1"
    old.write_text(",".join(columns) + "\n" + ",".join(values.get(c, "") for c in columns) + "\n")
    assert list(read_one(old)["timer"]) == [PERF_COUNTER]
