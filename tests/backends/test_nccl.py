"""NCCL and CUDA paths on a GPU machine (skipped elsewhere): every op and variant, coalesced forms
and the native SyncBN layers included, in half, float and int64 types, on every visible GPU (one
GPU runs them all at world size 1); CUDA-event timing; each rank on its own GPU.

    python -m pytest -q tests/backends/test_nccl.py       # on the GPU machine: this file is the GPU check

Their CPU halves (device choice, event arithmetic, variant gates, refusals) run everywhere, with
CUDA faked: tests/backends/test_devices.py, tests/run/test_timers.py, tests/syncbn/test_syncbn_op.py, tests/run/test_refusals.py.
"""

from __future__ import annotations

import math
import os
import re

import pandas as pd
import pytest
import torch

from commbench.backends.torch_dist import FLAT_ALL_GATHER, resolve_api
from commbench.ops import registry
from commbench.run.config import ONE_RANK_NOTE
from tests.support.distributed import commbench, torchrun

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="NCCL needs a CUDA GPU")

DTYPES = "float32,float16,bfloat16,int64"
SYNC_BN = ("--channels", "4,64", "--batch", "2", "--spatial", "4")


def _gpus() -> int:
    return torch.cuda.device_count()


def _unexpected_unavailable(df: pd.DataFrame, nproc: int) -> pd.DataFrame:
    """Unavailable rows other than the ones nccl must give: Horovod-only variants, batch norm in an
    integer type, point-to-point without a peer."""
    rows = df[df.status == "unavailable"]
    expected = (
        ((rows.op == "sync_bn") & (rows.variant == "native_horovod"))
        | ((rows.op == "grouped_all_gather") & (rows.variant == "grouped"))
        | ((rows.op == "sync_bn") & (rows.dtype == "int64"))
        | ((rows.op == "sendrecv") & (nproc == 1))
    )
    return rows[~expected]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["blocking", "nonblocking"])
def test_every_op_and_variant_on_every_visible_gpu(tmp_path, mode):
    """The GPU check: every op of `commbench list` in every variant, timed with CUDA events."""
    out = tmp_path / f"{mode}.csv"
    nproc = _gpus()
    args = f"sweep --backend nccl --sizes 8,64K,1M --dtype {DTYPES} -n 2 -w 1 --mode {mode} --window 2"
    proc = commbench(*args.split(), "--root", str(nproc - 1), *SYNC_BN, "-o", str(out), "--no-plot", timeout=540)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    df = pd.read_csv(out)
    assert {(name, v) for name, op in registry().items() for v in op().variants} <= set(zip(df.op, df.variant))
    unexpected = _unexpected_unavailable(df, nproc)
    assert unexpected.empty, unexpected[["op", "variant", "dtype", "note"]].to_string()
    measured = df[df.status != "unavailable"]
    bad = measured[(measured.wrong != 0) | (measured.status != "ok")]
    assert bad.empty, bad[["op", "variant", "phase", "dtype", "size_bytes", "wrong", "note"]].to_string()
    assert set(measured.dtype) == set(DTYPES.split(","))
    assert (measured.world_size == nproc).all() and df.backend_version.str.startswith("nccl").all()
    assert set(measured.timer) == {"cuda_event"}
    assert (measured.time_us_min >= 0).all() and measured.time_us_max.map(math.isfinite).all()
    # NCCL's reduce leaves the other ranks' tensors alone, so they are checked too: no note says otherwise.
    assert not measured[measured.op == "reduce"].note.fillna("").str.contains("only the root").any()
    # The coalesced forms went through torch's coalescing manager on the GPU.
    coalesced = measured[(measured.variant == "coalesced") | (measured.variant == "horovod_grouped")]
    assert not coalesced.empty and coalesced.api.str.startswith("_coalescing_manager").all()
    _native_torch_calls(measured[measured.variant == "native_torch"], nproc)
    others = measured[measured.variant != "native_torch"]
    assert (others.calls > 0).all(), others[others.calls <= 0][["op", "variant", "api"]]
    if nproc == 1:
        assert f"commbench: warning: 1 GPU is visible, so 1 rank runs, and {ONE_RANK_NOTE}" in proc.stderr
        assert f"({ONE_RANK_NOTE})" in proc.stdout
        assert measured.note.str.contains(ONE_RANK_NOTE).all()


def _native_torch_calls(rows: pd.DataFrame, nproc: int) -> None:
    """torch.nn.SyncBatchNorm's calls, counted as it made them: none on one rank (it falls back to a
    local batch norm), else one all-gather forward and one all-reduce backward."""
    assert set(rows.phase) == {"forward", "backward", "forward_backward"}
    for phase, calls in {"forward": 1, "backward": 1, "forward_backward": 2}.items():
        of_phase = rows[rows.phase == phase]
        assert (of_phase.calls == (0 if nproc == 1 else calls)).all(), of_phase[["phase", "calls", "api"]]
    if nproc > 1:  # the flat all-gather by this torch's name: torch 2.11's layer calls all_gather_into_tensor
        flat = resolve_api(FLAT_ALL_GATHER)  # the newest this torch has, which its layer calls (_functions.py)
        assert set(rows[rows.phase == "forward_backward"].api) == {f"{flat}+all_reduce"}


@pytest.mark.slow
def test_cuda_events_time_the_stream_and_are_read_after_one_synchronize():
    from commbench.run.timers import CudaEventTimer

    made: list[torch.cuda.Event] = []

    def event(**kwargs: bool) -> torch.cuda.Event:
        made.append(torch.cuda.Event(**kwargs))
        return made[-1]

    timer = CudaEventTimer(event)
    for cycles in (1_000, 1_000_000):
        timer.start()
        torch.cuda._sleep(cycles)  # GPU work the host does not wait for
        timer.stop()
    samples = timer.read_us()
    assert len(made) == 4 and all(e.query() for e in made)  # read waited for the last, so all are done
    assert len(samples) == 2 and all(math.isfinite(s) and s >= 0 for s in samples)


@pytest.mark.slow
def test_a_rank_takes_the_one_gpu_it_sees():
    from commbench.backends.devices import bind_own_gpu

    assert bind_own_gpu(0, 1, "nccl") == torch.device("cuda", 0)
    assert torch.cuda.current_device() == 0


@pytest.mark.slow
@pytest.mark.parametrize("restricted", [False, True], ids=["unrestricted", "CUDA_VISIBLE_DEVICES=0"])
def test_ranks_that_would_share_a_gpu_never_hang_or_crash(tmp_path, restricted):
    """More ranks than GPUs under torchrun. Unrestricted, every rank sees every GPU: refused in one
    line before the process group. Each restricted to the same GPU, every rank takes it as its own:
    NCCL refuses two ranks on one GPU when the communicator forms, and the ranks say so in one line
    (a NCCL that allows it just runs)."""
    if not restricted and "CUDA_VISIBLE_DEVICES" in os.environ:
        pytest.skip("the unrestricted case needs CUDA_VISIBLE_DEVICES unset")
    nproc = 2 if restricted else _gpus() + 1
    env = {"CUDA_VISIBLE_DEVICES": "0"} if restricted else {}
    args = ("sweep", "--backend", "nccl", "--op", "all_reduce", "--sizes", "8", "-n", "1", "-w", "0", "--timeout", "60")
    proc = torchrun(nproc, *args, "-o", str(tmp_path / "x.csv"), "--no-plot", env=env, timeout=240)
    if restricted and proc.returncode == 0:
        return
    expected = "NCCL found two ranks on one GPU" if restricted else f"{nproc} ranks on this host would share"
    errors = [line for line in proc.stderr.splitlines() if line.startswith("commbench: error:")]
    assert errors and all(expected in line for line in errors), proc.stderr[-4000:]
    assert re.search(r"exitcode\s*:\s*2\b", proc.stderr), proc.stderr[-4000:]  # a user error, not a crash
