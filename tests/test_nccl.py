"""NCCL paths: they need a GPU per rank, so they run on a GPU machine and skip cleanly elsewhere."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from tests.distributed import commbench

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="NCCL needs a CUDA GPU")


@pytest.mark.slow
def test_nccl_sweep_on_every_visible_gpu(tmp_path):
    out = tmp_path / "nccl.csv"
    nproc = torch.cuda.device_count()
    proc = commbench(
        *"sweep --backend nccl --op all_gather,reduce_scatter_base --sizes 8,64K,16M --dtype float32,bfloat16 -n 5 -w 2 -o".split(),
        str(out),
        "--no-plot",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    df = pd.read_csv(out)
    assert (df.wrong == 0).all() and (df.world_size == nproc).all()
    assert df.backend_version.str.startswith("nccl").all()
    assert len(df) == 2 * 2 * 3 * 2


@pytest.mark.slow
def test_nccl_nonblocking_mode(tmp_path):
    out = tmp_path / "nb.csv"
    proc = commbench(
        *"sweep --backend nccl --op all_gather --sizes 1M --mode nonblocking -n 3 -o".split(),
        str(out),
        "--no-plot",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (pd.read_csv(out).wrong == 0).all()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["blocking", "nonblocking"])
def test_nccl_collective_family(tmp_path, mode):
    """all_to_all, the rooted ops, send/recv, barrier and the in-place columns on every visible GPU."""
    out = tmp_path / "family.csv"
    nproc = torch.cuda.device_count()
    ops = "all_to_all,broadcast,reduce,gather,scatter,sendrecv,barrier,all_gather,reduce_scatter_base"
    proc = commbench(
        *f"sweep --backend nccl --op {ops} --sizes 8,64K,16M -n 3 -w 1 --mode {mode} --root {nproc - 1} -o".split(),
        str(out),
        "--no-plot",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    df = pd.read_csv(out)
    measured = df[df.status != "unavailable"]
    assert (measured.wrong == 0).all() and (measured.status == "ok").all()
    # NCCL's reduce leaves the other ranks' tensors alone, so they are checked too: no note says otherwise.
    assert not df[df.op == "reduce"].note.fillna("").str.contains("only the root").any()
    unavailable = df[df.status == "unavailable"]
    if nproc > 1:
        assert unavailable.empty, unavailable[["op", "variant", "note"]]
    else:  # one GPU: point-to-point has no peer
        assert set(unavailable.op) == {"sendrecv"}
