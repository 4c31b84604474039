"""`commbench replay` end to end: its refusals in one line, and a hand-built plan replayed through
commbench's own spawner on 2 Gloo ranks (the CSVs, the lines, the chart, the history, --json)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from commbench.cli import main
from commbench.replay import source
from tests.replay import plans
from tests.support.distributed import REPO, commbench

FAST = ("--iters", "6", "--warmup", "1", "--rounds", "2", "--backend", "gloo")


def replay_with(plan_name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.replay.cli_with_plan", plan_name, "replay", "job.json", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


@pytest.fixture
def with_plan(monkeypatch: pytest.MonkeyPatch):
    def use(name: str) -> None:
        plan = getattr(plans, name)()
        monkeypatch.setattr(source, "read_plan", lambda paths, *_: source.Source(plan, "nccl 2.17.1"))

    return use


def one_line_error(result, *fragments: str) -> str:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("commbench: error: "), result.output
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


def test_bad_input_is_one_line_and_exit_2(with_plan, tmp_path: Path) -> None:
    with_plan("tensor_parallel")
    invoke = CliRunner().invoke
    one_line_error(invoke(main, ["replay"]), "no trace given")
    one_line_error(invoke(main, ["replay", "t.json", "--project", "16,x"]), "--project '16,x'", "16,64,512")
    one_line_error(
        invoke(main, ["replay", "t.json", "--project", "16", "--nproc", "4"]), "pass --model", "commbench sweep"
    )
    one_line_error(invoke(main, ["replay", "t.json", "--model", str(tmp_path / "none.csv")]), "no such file")
    one_line_error(
        invoke(main, ["replay", "t.json", "--nproc", "2", "--backend", "gloo"]),
        "the trace's groups need 4 ranks and this launch has 2",
        "--scale",
    )
    run = str(tmp_path / "out" / "a.csv")
    for same in ("a.csv", "a.env.json", "a.replay.csv", "a-replay.png"):  # the run's own outputs
        one_line_error(
            invoke(main, ["replay", "t.json", "--nproc", "4", "-o", run, "--json", str(tmp_path / "out" / same)]),
            "is also where",
            "one run writes each file once",
        )
    history = str(tmp_path / "h.sqlite")
    one_line_error(
        invoke(main, ["replay", "t.json", "--nproc", "4", "-o", run, "--history", history, "--json", history]),
        "is the results history",
    )
    for bad in ("0", "-1"):
        one_line_error(
            invoke(main, ["replay", "t.json", "--nproc", bad, "--scale"]), f"--nproc must be at least 1 (got {bad})"
        )
    (tmp_path / "out" / "a.replay.csv").write_text("my notes\n")  # a leftover beside the CSV, not commbench's
    one_line_error(
        invoke(main, ["replay", "t.json", "--nproc", "4", "-o", run, "--overwrite"]), "was not written by commbench"
    )
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.replay.csv"]  # before any rank started
    with_plan("uneven_shards")
    one_line_error(
        invoke(main, ["replay", "t.json", "--nproc", "2", "-o", f"{tmp_path}/"]),
        "cannot replay reduce_scatter_base/flat of 601 elements: 601 elements do not split evenly over its 2 ranks",
    )
    assert not list(tmp_path.glob("*.csv"))  # refused before any file was made


@pytest.mark.slow
def test_a_plan_replayed_on_two_gloo_ranks_through_the_spawner(tmp_path: Path) -> None:
    history = tmp_path / "h.sqlite"
    out = tmp_path / "runs"
    args = ("--nproc", "2", *FAST, "-o", f"{out}/", "--history", str(history))
    first = replay_with("fsdp_like", *args, "--json", str(tmp_path / "replay.json"))
    assert first.returncode == 0, first.stderr + first.stdout
    lines = first.stdout.splitlines()
    verdict = next(line for line in lines if line.startswith("# step communication here "))
    assert verdict.endswith(
        "; in the trace 0.480 ms on 2 ranks of nccl 2.17.1 (the time the step's calls ran, overlaps merged, "
        "as here; its calls' own times add up to 0.601 ms)"
    )
    assert " on 2 ranks of gloo " in verdict
    assert any(line.startswith("# step: ") and "6 distinct" not in line for line in lines)
    assert (
        "#   _allgather_base_coalesced float32 8 elements on ranks 0,1: no op for coalesced all_gather_base; 7.7% of the recorded time"
        in lines
    )
    (results,) = out.glob("*-gloo-n2-*[!y].csv")  # not the .replay.csv
    with open(results.with_name(results.stem + ".replay.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["kind"], r["op"], r["count_per_step"]) for r in rows] == [
        ("unmapped", "_allgather_base_coalesced", ""),
        ("call", "broadcast", "1"),
        ("call", "all_gather", "2"),
        ("call", "reduce_scatter_base", "1"),
        ("call", "all_to_all", "1"),
        ("call", "all_reduce", "1"),
        ("step", "step", "1"),
    ]
    measured = [r for r in rows if r["kind"] != "unmapped"]
    assert all(r["status"] == "ok" and r["wrong"] == "0" for r in measured)
    assert all(float(r["time_us_p50_lo"]) <= float(r["time_us_p50"]) <= float(r["time_us_p50_hi"]) for r in measured)
    gathered = next(r for r in rows if r["op"] == "all_gather")
    assert float(gathered["replayed_us_per_step"]) == pytest.approx(
        2 * float(gathered["time_us_p50"]), rel=1e-5
    )  # cells hold 6 digits
    assert (tmp_path / "runs" / f"{results.stem}-replay.png").is_file()
    document = json.loads((tmp_path / "replay.json").read_text())
    assert document["trace_digest"] == plans.DIGEST and document["rows"] == rows
    # The results CSV is a sweep's: one row per distinct call and the step, in the history.
    with open(results, newline="") as f:
        sweep_rows = list(csv.DictReader(f))
    assert [r["op"] for r in sweep_rows] == [
        "broadcast",
        "all_gather",
        "reduce_scatter_base",
        "all_to_all",
        "all_reduce",
        "step",
    ]
    assert sweep_rows[0]["phase"] == "comm root 1"  # the broadcast from rank 1
    # A second replay of the same trace files beside the first under one fingerprint; compare finds it.
    second = replay_with("fsdp_like", *args, "--no-plot")
    assert second.returncode == 0, second.stderr + second.stdout
    later = max(out.glob("*-gloo-n2-*[!y].csv"), key=lambda p: p.stat().st_mtime)
    with open(later, newline="") as f:
        assert next(csv.DictReader(f))["fingerprint"] == sweep_rows[0]["fingerprint"]
    judged = commbench("compare", str(later), "--history", str(history))
    assert judged.returncode in (0, 1, 5), judged.stderr  # 5: one earlier run cannot resolve the threshold
    fingerprint = sweep_rows[0]["fingerprint"]
    assert f"holds 1 run of fingerprint {fingerprint} before this one" in judged.stdout
    assert "step/sequence/comm mixed blocking" in judged.stdout  # the step is compared as a row too
