"""`commbench replay` of the public DDP trace on 2 Gloo ranks, through the readers and the mapping.

The readers (commbench/replay/load.py, mapping.py) and the copied traces (tests/data/traces/) come
from their own branch: until both are here this test is skipped, never faked."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.distributed import REPO, commbench

pytestmark = pytest.mark.slow
DDP_TRACE = REPO / "tests" / "data" / "traces" / "ddp-2gpu-nccl-kineto.json.gz"


def test_the_ddp_trace_replays_on_two_gloo_ranks(tmp_path: Path) -> None:
    pytest.importorskip("commbench.replay.load", reason="the trace readers are not in this build yet")
    pytest.importorskip("commbench.replay.mapping", reason="the mapping is not in this build yet")
    if not DDP_TRACE.is_file():
        pytest.skip(f"{DDP_TRACE} is not in this checkout yet")
    out = tmp_path / "runs"
    result = commbench(
        "replay", str(DDP_TRACE), "--nproc", "2", "--backend", "gloo", "--iters", "3", "--warmup", "1",
        "--rounds", "1", "-o", f"{out}/", "--no-history", timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr + result.stdout
    verdict = next(line for line in result.stdout.splitlines() if line.startswith("# step communication here "))
    assert "in the trace" in verdict and "on 2 ranks of nccl 2.17.1" in verdict
    assert "not replayed" not in result.stdout  # every collective of this trace maps
    assert len(list(out.glob("*-replay.png"))) == 1
