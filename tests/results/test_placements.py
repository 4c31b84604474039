"""What a comparison of two nccl-tests runs can resolve from their own figures (results/placements.py,
analysis/verdict.py placements_p): a row holds one time, but each size is measured out of place and
in place, two samples of one measurement. Judged on the real logs of tests/data/nccl-tests."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from commbench.analysis.compare import compare_runs
from commbench.analysis.verdict import placements_p
from commbench.cli import main
from commbench.results.placements import PLACEMENT_PAIRS, PLACEMENT_VAR
from commbench.results.reader import read_one
from tests.support.nccl_tests_json import nccl_tests_file
from tests.support.nccl_tests_logs import CONFIG_A, DATA, NO_FEC, RS_FEC, text
from tests.support.synth_results import Case, synth_run


def test_a_runs_noise_is_its_placements_log_difference_pooled_over_its_sizes() -> None:
    frame = read_one(DATA / RS_FEC)
    pairs = [(27211.0, 25806.7), (50573.4, 48690.4), (96986.7, 95610.9)]  # the log's out-of-place, in-place times
    expected = sum(math.log(a / b) ** 2 for a, b in pairs) / (2 * len(pairs))
    assert set(frame[PLACEMENT_PAIRS]) == {3} and frame[PLACEMENT_VAR].tolist() == pytest.approx([expected] * 6)


def test_rows_that_keep_their_own_samples_get_no_placement_spread(tmp_path: Path) -> None:
    frame = read_one(synth_run(tmp_path / "cb.csv", [Case("all_gather", "flat")], seed=1, raw=False))
    assert frame[PLACEMENT_VAR].isna().all() and (frame[PLACEMENT_PAIRS] == 0).all()


def test_the_dgx_spark_pair_without_rs_fec_is_a_regression() -> None:
    """Two DGX Spark nodes, all_gather 1-4 GB: 21.40 GB/s with RS FEC, 2.82 GB/s without."""
    result = CliRunner().invoke(main, ["compare", str(DATA / RS_FEC), str(DATA / NO_FEC)])
    assert result.exit_code == 1, result.output
    rows = [line for line in result.output.splitlines() if line.startswith("  all_gather/")]
    assert len(rows) == 6 and all(line.split()[-3:-2] == ["placements"] for line in rows), result.output
    assert all(line.endswith("regression") for line in rows)
    assert "# noise test placements: nccl-tests' out-of-place and in-place times of each size" in result.output
    assert result.output.rstrip().endswith("6 regressions; FAILED")


@pytest.mark.parametrize("name", [RS_FEC, CONFIG_A[0]])
def test_a_log_against_itself_never_fails(name: str) -> None:
    comparison = compare_runs(DATA / name, DATA / name)
    assert comparison.exit_code in (0, 5) and not comparison.failed
    assert {d.verdict for d in comparison.deltas} <= {"unchanged", "inconclusive"}
    assert all(math.isfinite(d.resolution) and d.method == "placements" for d in comparison.deltas)


def test_a_copy_six_percent_slower_is_judged_by_what_the_runs_resolve(tmp_path: Path) -> None:
    """The pair that could never pass (`p=0 ... resolves inf ... regression`): every row now has a
    finite resolution from the placements, and a verdict that rests on it."""
    base = nccl_tests_file(tmp_path / "base.json", per_iter=False, seed=1)
    slower = nccl_tests_file(tmp_path / "slower.json", per_iter=False, seed=2, factor=1.06)
    comparison = compare_runs(base, slower)
    assert all(d.method == "placements" and math.isfinite(d.resolution) for d in comparison.deltas)
    assert all(d.resolution < 1.06 for d in comparison.deltas)  # their placements agree within 3%: 6% is seen
    same = compare_runs(base, base)
    assert not same.failed and same.count("unchanged") == len(same.deltas)


def test_a_slower_copy_of_a_real_log_resolves_what_its_placements_allow(tmp_path: Path) -> None:
    """exp1 Config A rep 1 with every time 6% longer (made here): the run's placements differ by
    under 1% (the most at 16 MB: 7728 and 7659 us), so each row resolves about 1.02x and sees it."""
    lines = []
    for line in text(CONFIG_A[0]).splitlines(keepends=True):
        words = line.removeprefix("[1,0]<stdout>:").split()
        if len(words) == 13 and words[0].isdigit():
            words[5], words[9] = f"{float(words[5]) * 1.06:.2f}", f"{float(words[9]) * 1.06:.2f}"
            line = "[1,0]<stdout>:  " + "  ".join(words) + "\n"
        lines.append(line)
    slower = tmp_path / "slower.log"
    slower.write_text("".join(lines))
    comparison = compare_runs(DATA / CONFIG_A[0], slower)
    rows = comparison.deltas
    assert {d.method for d in rows} == {"placements"} and all(1.0 < d.resolution < 1.03 for d in rows)
    assert comparison.exit_code == 1 and comparison.count("regression") == len(rows)
    series = {s.key[1]: s for s in comparison.shifts}  # the whole series moved 6%: its own test sees that
    assert series["flat"].ratio == pytest.approx(1.06, abs=1e-3)


def test_placements_that_never_differ_give_no_spread_to_judge_by() -> None:
    p, noise = placements_p(math.log(2), (0.0, 3), (0.0, 3))
    assert p == 1.0 and noise.spread == math.inf and noise.df == 6  # inconclusive, never a regression by default
    p, noise = placements_p(0.0, (0.01, 3), (0.01, 5))
    assert p == pytest.approx(1.0) and noise.spread == pytest.approx(math.sqrt(0.02)) and noise.df == 8
