"""The resolution rule on synthetic histories of known spread: what a verdict could have seen, the
inconclusive verdict and its exit code, and the launches that make it conclusive."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from scipy.stats import norm

from commbench.analysis.history_gate import compare_history, plan_launches
from commbench.analysis.resolution import Noise, detection_probability, launches_for, planning_noise, resolution
from commbench.analysis.verdict import Criteria, Threshold
from commbench.cli import main
from commbench.history.importer import import_csvs
from commbench.history.store import open_history
from tests.support.synth_results import Case, synth_run

SIZES = (8, 1024, 65536, 1 << 20, 4 << 20)
QUIET = {"rounds": 3, "round_sigma": 0.005, "sigma": 0.005, "raw": False}
RUNS = 30


def _offsets(count: int, sd: float) -> list[float]:
    """Log offsets of exactly known spread: normal quantiles (mean 0, robust sd = sd), interleaved
    so no stretch of the history drifts."""
    q = [sd * norm.ppf((i + 0.5) / count) for i in range(count)]
    return [q[i // 2] if i % 2 == 0 else q[count - 1 - i // 2] for i in range(count)]


def _run(path: Path, factor: float, seed: int, minute: int, run_id: str) -> pd.DataFrame:
    synth_run(path, [Case("all_gather", "flat", factor=factor, sizes=SIZES)], seed=seed, run_id=run_id, **QUIET)
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    frame["timestamp"] = f"2026-01-01T{minute // 60:02d}:{minute % 60:02d}:00+00:00"
    return frame


def _history(tmp_path: Path, sd: float) -> Path:
    """RUNS runs of one command, each launch offset by a draw of known spread sd (log)."""
    paths = []
    for i, offset in enumerate(_offsets(RUNS, sd)):
        path = tmp_path / f"h{i:02d}.csv"
        _run(path, math.exp(offset), seed=i, minute=i, run_id=f"hist{i:02d}").to_csv(path, index=False)
        paths.append(path)
    location = tmp_path / "h.sqlite"
    history = open_history(str(location))
    import_csvs(history, paths)
    history.close()
    return location


def _candidate(tmp_path: Path, factor: float, launches: int, sd: float, name: str = "cand") -> Path:
    """A candidate of `launches` launches (one --repeat group, one CSV), each with its own offset of
    spread sd around a true slowdown `factor`."""
    offsets = _offsets(launches, sd) if launches > 1 else [0.0]
    frames = []
    for k, offset in enumerate(offsets, start=1):
        part = tmp_path / f"{name}-{k}.csv"
        frame = _run(part, factor * math.exp(offset), seed=100 + k, minute=100 + k, run_id=f"{name}{k:02d}")
        if launches > 1:
            frame["launch"], frame["launch_group"] = str(k), f"group-{name}"
        frames.append(frame)
        part.unlink()
    path = tmp_path / f"{name}.csv"
    pd.concat(frames).to_csv(path, index=False)
    return path


def _judge(tmp_path: Path, location: Path, candidate: Path, threshold: str):
    history = open_history(str(location), create=False)
    try:
        return compare_history(candidate, history, last=RUNS, criteria=Criteria(threshold=Threshold.parse(threshold)))
    finally:
        history.close()


def _recommended(location: Path, candidate: Path, ratio: float) -> int:
    history = open_history(str(location), create=False)
    try:
        (plan,) = plan_launches(candidate, history, RUNS, Criteria())
    finally:
        history.close()
    k = launches_for(ratio, plan.noise, plan.alpha, plan.tests)
    assert k is not None
    return k


def test_the_formula_its_power_and_the_launches_it_needs() -> None:
    noise = Noise(0.15, 29, 30)
    one = resolution(noise, 0.05, 1)
    # (t(0.975, 29) + t(0.9, 29)) * 0.15 * sqrt(1 + 1/30)
    assert one == pytest.approx(math.exp((2.0452 + 1.3114) * 0.15 * math.sqrt(1 + 1 / 30)), rel=1e-3)
    # At its own resolution a shift is caught 9 times in 10 (the threshold below it).
    assert detection_probability(math.log(one), noise, 0.05, 1, 1, 0.0) == pytest.approx(0.9, abs=0.01)
    # A plan takes the spread at its 80% upper bound: sqrt(df / chi2(0.2, df)), chi2(0.2, 29) = 22.475.
    planned = planning_noise(noise)
    assert planned.spread == pytest.approx(0.15 * math.sqrt(29 / 22.475), rel=1e-3) and planned.df == noise.df
    k = launches_for(1.2, noise, 0.05, 1)
    assert resolution(planned, 0.05, 1, k) <= 1.2 < resolution(planned, 0.05, 1, k - 1)
    assert resolution(noise, 0.05, 1, k) < 1.2  # with the spread as estimated, the K resolves more than asked
    # Against a longer history the history's own median weighs less, and its spread is known better.
    longer = launches_for(1.2, noise, 0.05, 1, history_runs=60)
    assert longer < k and planning_noise(noise, 60).history_runs == 60
    # The history's own median limits the gate: no number of launches resolves what it cannot.
    assert launches_for(1.05, noise, 0.05, 1) is None


def test_a_15x_shift_with_sd_005_is_a_regression(tmp_path: Path) -> None:
    location = _history(tmp_path, 0.05)
    result = _judge(tmp_path, location, _candidate(tmp_path, 1.5, 1, 0.05), "10%")
    assert [s.verdict for s in result.shifts] == ["regression"] and result.exit_code == 1
    assert result.shifts[0].resolution < 1.5


def test_a_12x_shift_with_sd_015_is_inconclusive_at_one_launch_and_a_regression_at_the_recommended_k(
    tmp_path: Path,
) -> None:
    location = _history(tmp_path, 0.15)
    once = _candidate(tmp_path, 1.2, 1, 0.15, "once")
    result = _judge(tmp_path, location, once, "10%")
    assert [s.verdict for s in result.shifts] == ["inconclusive"] and result.exit_code == 5
    assert result.shifts[0].resolution > 1.5
    k = _recommended(location, once, 1.2)
    assert 10 <= k <= 30  # sd 0.15 planned at its upper bound (0.17) against 30 runs
    pooled = _judge(tmp_path, location, _candidate(tmp_path, 1.2, k, 0.15, "pooled"), "10%")
    assert pooled.launches == k and [s.verdict for s in pooled.shifts] == ["regression"]
    assert pooled.shifts[0].resolution <= 1.2 and pooled.exit_code == 1


def test_identical_groups_pass_with_their_resolution(tmp_path: Path) -> None:
    location = _history(tmp_path, 0.15)
    k = _recommended(location, _candidate(tmp_path, 1.0, 1, 0.15, "probe"), 1.2)
    result = _judge(tmp_path, location, _candidate(tmp_path, 1.0, k, 0.15, "same"), "20%")
    assert [s.verdict for s in result.shifts] == ["unchanged"] and result.exit_code == 0
    assert result.shifts[0].resolution <= 1.2


def test_exit_codes_and_lines_through_the_cli(tmp_path: Path) -> None:
    location = _history(tmp_path, 0.15)
    once = _candidate(tmp_path, 1.2, 1, 0.15, "once")
    run = CliRunner().invoke(
        main, ["compare", "--history", str(location), "--last", str(RUNS), "--threshold", "20%", str(once)]
    )
    assert run.exit_code == 5, run.output
    line = re.search(
        r"# all_gather/flat: \+\d+% \+/- \d+%; this history resolves (\d\.\d\d)x; a 1\.20x needs (\d+) candidate launches: --repeat \2\n",
        run.output,
    )
    assert line is not None and float(line.group(1)) > 1.5, run.output
    assert run.output.rstrip().endswith("INCONCLUSIVE")
    plan = CliRunner().invoke(
        main, ["compare", "--history", str(location), "--last", str(RUNS), "--plan", "1.2x", str(once)]
    )
    assert plan.exit_code == 0, plan.output
    k = int(re.search(r"# recommended: --repeat (\d+)", plan.output).group(1))
    assert k == _recommended(location, once, 1.2) == int(line.group(2))
    same = _candidate(tmp_path, 1.0, k, 0.15, "same")
    passed = CliRunner().invoke(
        main, ["compare", "--history", str(location), "--last", str(RUNS), "--threshold", "20%", str(same)]
    )
    assert passed.exit_code == 0, passed.output
    assert re.search(rf"this history with {k} launches resolves 1\.[0-2]\dx \(unchanged", passed.output), passed.output
    assert "; passed (every series resolves its threshold; the coarsest 1." in passed.output
    bad = CliRunner().invoke(main, ["compare", "--history", str(location), "--plan", "0.9x", str(once)])
    assert bad.exit_code == 2 and "--plan takes a slowdown" in bad.output
    help_text = CliRunner().invoke(main, ["compare", "--help"]).output
    assert "5 inconclusive" in help_text and "0 passed" in help_text
