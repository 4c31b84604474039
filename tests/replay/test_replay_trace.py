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
    # like with like, said: the step beside the trace's calls merged, or (a plan without their spans)
    # the calls' sums on both sides
    assert "on 2 ranks of nccl 2.17.1" in verdict
    assert "overlaps merged, as here" in verdict or "each call timed alone" in verdict, verdict
    assert "not replayed" not in result.stdout  # every collective of this trace maps
    assert len(list(out.glob("*-replay.png"))) == 1
    # Each distinct call's replay row holds its own call's counts and recorded time (the five
    # gradient buckets share op, variant, phase and dtype), and they add up to the step's.
    from commbench.replay.chart import per_kind
    from commbench.replay.load import load
    from commbench.replay.mapping import plan
    from commbench.replay.summary import read_replay, recorded_calls_us, recorded_per_step_us, recorded_step_us

    p = plan(load([str(DDP_TRACE)]))
    (replay_csv,) = out.glob("*.replay.csv")
    rows = read_replay(replay_csv)
    calls = [r for r in rows if r["kind"] == "call"]
    assert [(r["op"], int(r["in_elems"]), int(r["count_per_step"])) for r in calls] == [
        (c.op, c.in_elems, n) for c, n in p.counts
    ]
    assert [float(r["recorded_us_per_step"]) for r in calls] == pytest.approx(
        [recorded_per_step_us(p, c) for c, _ in p.counts], rel=1e-5
    )  # the CSV keeps 6 significant digits
    kinds = per_kind(rows)
    # the trace's calls add up to their recorded times per step; the whole step is its own figure (the
    # time its calls ran, overlaps merged), never their sum
    parts = sum(v[0] for k, v in kinds.items() if k != "whole step")
    assert parts == pytest.approx(recorded_calls_us(p), rel=1e-5)
    whole = kinds["whole step"][0]
    assert whole is None if not p.recorded_wall_us else whole == pytest.approx(recorded_step_us(p), rel=1e-5)
