"""--overlap: the arithmetic on known timings, the matmul's calibration agreed across ranks, and the
columns of a real 2-rank sweep."""

from __future__ import annotations

import itertools
import math

import pandas as pd
import pytest
from click.testing import CliRunner

from commbench.cli import main
from commbench.results.stats import overlap_fraction
from commbench.run.overlap import calibrate, flops_of, parse_compute, side_for
from tests.support.distributed import commbench, run_ranks
from tests.support.errors import assert_one_line_error


@pytest.mark.parametrize(
    "comm, compute, overlapped, expected",
    [
        (100.0, 60.0, 100.0, 1.0),  # perfect: the compute hid entirely behind the collective
        (100.0, 60.0, 160.0, 0.0),  # none: one after the other
        (100.0, 60.0, 130.0, 0.5),  # half of the shorter (60) hidden
        (40.0, 200.0, 220.0, 0.5),  # the collective is the shorter one
        (100.0, 60.0, 90.0, 1.0),  # faster together than the longer alone (noise): clipped to 1
        (100.0, 60.0, 400.0, 0.0),  # slower than both in turn (contention): clipped to 0
    ],
)
def test_overlap_fraction(comm, compute, overlapped, expected):
    assert overlap_fraction(comm, compute, overlapped) == pytest.approx(expected)


def test_overlap_is_unknown_without_both_times():
    assert math.isnan(overlap_fraction(0.0, 10.0, 10.0)) and math.isnan(overlap_fraction(math.nan, 1.0, 1.0))


def test_compute_sizes():
    assert parse_compute("auto") == "auto" and parse_compute(" AUTO ") == "auto"
    assert parse_compute("1G") == str(1 << 30) and parse_compute("5e9") == str(5 * 10**9)
    assert side_for(flops_of(512)) == 512 and side_for(1.0) == 8 and side_for(1e30) == 16384


def _calibrated(backend, slow_rank: int):
    """Each rank measures its own FLOP rate (rank slow_rank's reads 4x slower); all must agree."""

    def seconds_of(kernel):
        return kernel.flops / 1e9 * (4.0 if backend.rank == slow_rank else 1.0)

    def agree_max(value):
        return max(backend.all_gather_object(value))

    kernel = calibrate(0.002, backend.device, __import__("torch").float32, agree_max, seconds_of)
    return kernel.side, kernel.flops


@pytest.mark.slow
def test_calibration_agrees_across_ranks():
    sides = run_ranks(_calibrated, 2, 1)
    assert sides[0] == sides[1]
    # 2 ms at the faster rank's 1 GFLOP/s is 2 MFLOP: the agreed size is what the faster rank wants.
    assert sides[0][0] == side_for(2e-3 * 1e9)


@pytest.mark.parametrize("value", ["lots", "-1", "0", "1e40"])
def test_bad_compute_is_one_line(value):
    assert_one_line_error(CliRunner().invoke(main, ["sweep", "--overlap", "--compute", value]), "--compute")


@pytest.mark.slow
def test_a_sweep_with_overlap_reports_all_three_times(tmp_path):
    out = tmp_path / "ov.csv"
    proc = commbench(
        *"sweep --op all_gather --variant flat --sizes 4K,256K --overlap --iters 6 -w 1 --no-plot -o".split(),
        str(out),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = pd.read_csv(out)
    assert rows[["comm_us", "compute_us", "overlapped_us", "compute_flops"]].gt(0).all().all()
    assert rows["overlap"].between(0, 1).all()
    assert (rows["comm_us"] == rows["time_us_p50"]).all()
    assert rows["note"].str.contains("intra-op thread").all()
    plain = tmp_path / "plain.csv"
    assert (
        commbench(
            *"sweep --op all_gather --variant flat --sizes 4K --iters 2 -w 0 --no-plot -o".split(), str(plain)
        ).returncode
        == 0
    )
    assert pd.read_csv(plain)[["comm_us", "overlap"]].isna().all().all()


def test_the_probe_grows_until_it_times_the_kernel_not_the_launch():
    """A GPU-like clock: 20 us of launch and synchronise around every run, then 10 TFLOP/s. A 128-side
    probe would read 50x too slow; the grown probe reads the kernel's rate to within a few percent."""
    import torch

    from commbench.run.overlap import PROBE_MIN_S, PROBE_SIDE, probe_rate

    sides = []

    def seconds_of(kernel):
        sides.append(kernel.side)
        return 20e-6 + kernel.flops / 1e13

    rate = probe_rate(torch.device("cpu"), torch.float32, seconds_of)
    assert rate == pytest.approx(1e13, rel=0.05)
    tried = sorted(set(sides))
    assert tried[0] == PROBE_SIDE and all(b == 2 * a for a, b in itertools.pairwise(tried))
    assert 20e-6 + flops_of(tried[-1]) / 1e13 >= PROBE_MIN_S > 20e-6 + flops_of(tried[-2]) / 1e13


def test_the_calibration_clock_on_cuda_is_a_pair_of_events_around_the_kernel():
    from commbench.run.overlap import ComputeKernel, event_seconds

    log, made = [], []

    class Event:
        def __init__(self, enable_timing):
            assert enable_timing
            self.name = ("start", "stop")[len(made)]
            made.append(self)

        def record(self):
            log.append(f"record {self.name}")

        def synchronize(self):
            log.append(f"synchronize {self.name}")

        def elapsed_time(self, other):
            return 0.75  # milliseconds

    kernel = ComputeKernel(8, "cpu", __import__("torch").float32)
    kernel.run = lambda: log.append("matmul")
    assert event_seconds(kernel, Event) == pytest.approx(0.75e-3)
    assert log == ["record start", "matmul", "record stop", "synchronize stop"]


def test_an_auto_matmul_stays_within_what_the_memory_check_reserved():
    from commbench.run.overlap import AUTO_KERNEL_BYTES, auto_side_limit, kernel_bytes, overlap_bytes

    for size in (2, 4, 8):
        assert (
            kernel_bytes(auto_side_limit(size), size)
            <= AUTO_KERNEL_BYTES
            < kernel_bytes(auto_side_limit(size) + 8, size)
        )
    assert overlap_bytes("auto", 4) == AUTO_KERNEL_BYTES
    assert overlap_bytes(str(flops_of(1024)), 4) == kernel_bytes(1024, 4)
