"""compare: planted changes are found, same-distribution runs stay quiet, and the exit code gates CI."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from commbench.analysis.compare import compare_runs
from commbench.analysis.verdict import Criteria, Threshold
from commbench.cli import main
from commbench.errors import UserError
from commbench.results.stats import holm, mann_whitney_p
from tests.support.errors import assert_one_line_error
from tests.support.synth_results import Case, synth_run

CASES = [Case("all_gather", "flat"), Case("all_gather", "list"), Case("reduce_scatter_base", "flat")]
SLOW = 1 << 20  # the size a planted change hits


def _planted(factor: float) -> list[Case]:
    return [Case("all_gather", "flat", factors_by_size={SLOW: factor}), *CASES[1:]]


def _compare(*args: str):
    return CliRunner().invoke(main, ["compare", *args])


# How each noise test is reached: (synth_run options, the method, words of its line in the output).
METHODS = {
    "rounds": ({"rounds": 5, "round_sigma": 0.01, "raw": False}, "Welch's t"),
    "u-test": ({"raw": True}, "Mann-Whitney U"),
    "interval": ({"raw": False}, "95% interval of the mean"),
    "spread": ({"raw": False, "version": 1}, "own spread"),
}
METHOD_NAMES = {"rounds": "rounds", "u-test": "U", "interval": "interval", "spread": "spread"}


@pytest.mark.parametrize("method", list(METHODS))
def test_planted_20_percent_regression_is_flagged_and_fails(tmp_path: Path, method: str) -> None:
    options, words = METHODS[method]
    base = synth_run(tmp_path / "base.csv", CASES, seed=1, **options)
    cand = synth_run(tmp_path / "cand.csv", _planted(1.2), seed=2, **options)
    result = compare_runs(base, cand)
    flagged = [(d.key[0], d.key[1], d.key[5], d.verdict) for d in result.deltas if d.verdict != "unchanged"]
    assert flagged == [("all_gather", "flat", SLOW, "regression")]
    assert result.methods == [METHOD_NAMES[method]]
    cli = _compare(str(base), str(cand))
    assert cli.exit_code == 1, cli.output
    assert words in cli.output and "Holm" in cli.output
    assert "1 regression" in cli.output and "FAILED" in cli.output


@pytest.mark.parametrize("method", list(METHODS))
def test_runs_from_one_distribution_stay_quiet(tmp_path: Path, method: str) -> None:
    options = METHODS[method][0]
    base = synth_run(tmp_path / "base.csv", CASES, seed=11, **options)
    cand = synth_run(tmp_path / "cand.csv", CASES, seed=12, **options)
    result = compare_runs(base, cand)
    assert {d.verdict for d in result.deltas} <= {"unchanged", "within noise"}
    assert len(result.deltas) == 12 and not result.failed
    assert _compare(str(base), str(cand)).exit_code == 0


def test_drift_between_rounds_is_noise_not_a_regression(tmp_path: Path) -> None:
    # Each run's rounds wander by ~8% (the machine's load moving), while the samples within a round
    # are tight: the U test on samples would call 10% changes; the rounds' spread does not.
    drift = {"rounds": 5, "round_sigma": 0.08, "sigma": 0.01, "iters": 200}
    base = synth_run(tmp_path / "base.csv", CASES, seed=21, raw=True, **drift)
    cand = synth_run(tmp_path / "cand.csv", CASES, seed=22, raw=True, **drift)
    result = compare_runs(base, cand)
    assert result.methods == ["rounds"] and not result.failed
    assert any(abs(d.change) > 0.05 for d in result.deltas)  # changes over the threshold happened


def test_a_planted_slowdown_stands_out_of_drifting_rounds(tmp_path: Path) -> None:
    drift = {"rounds": 5, "round_sigma": 0.05, "raw": False}
    base = synth_run(tmp_path / "base.csv", CASES, seed=31, **drift)
    cand = synth_run(tmp_path / "cand.csv", [Case(c.op, c.variant, factor=1.5) for c in CASES], seed=32, **drift)
    result = compare_runs(base, cand)
    assert {d.verdict for d in result.deltas} == {"regression"}


def test_holm_keeps_the_family_wise_error() -> None:
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5]) == [0.5] and holm([]) == []


def test_a_large_change_within_noise_is_not_called(tmp_path: Path) -> None:
    # 10% apart but with a 60% spread per iteration: over the threshold, not beyond the noise.
    base = synth_run(tmp_path / "base.csv", CASES[:1], seed=5, sigma=0.6, iters=10)
    cand = synth_run(tmp_path / "cand.csv", [Case("all_gather", "flat", factor=1.1)], seed=6, sigma=0.6, iters=10)
    verdicts = {d.verdict for d in compare_runs(base, cand).deltas}
    assert "regression" not in verdicts and "within noise" in verdicts


def test_improvement_is_reported_and_passes(tmp_path: Path) -> None:
    base = synth_run(tmp_path / "base.csv", CASES, seed=1)
    cand = synth_run(tmp_path / "cand.csv", _planted(0.8), seed=2)
    result = compare_runs(base, cand)
    assert [d.verdict for d in result.deltas if d.verdict != "unchanged"] == ["improvement"]
    assert _compare(str(base), str(cand)).exit_code == 0


def test_bandwidth_metric_counts_a_drop_as_regression(tmp_path: Path) -> None:
    base = synth_run(tmp_path / "base.csv", CASES, seed=1)
    cand = synth_run(tmp_path / "cand.csv", _planted(1.2), seed=2)
    result = compare_runs(base, cand, Criteria(metric="busbw_gbps"))
    assert [d.verdict for d in result.deltas if d.verdict != "unchanged"] == ["regression"]


def test_a_latency_only_row_is_compared_on_time_and_named_for_bandwidth(tmp_path: Path) -> None:
    barrier = Case("barrier", "barrier", sizes=(0,), latency_only=True)
    base = synth_run(tmp_path / "base.csv", [*CASES, barrier], seed=1)
    cand = synth_run(tmp_path / "cand.csv", [*CASES, barrier], seed=2)
    timed = compare_runs(base, cand)
    assert any(d.key[0] == "barrier" for d in timed.deltas) and not timed.not_compared
    by_bandwidth = compare_runs(base, cand, Criteria(metric="busbw_gbps"))
    assert not any(d.key[0] == "barrier" for d in by_bandwidth.deltas)
    assert by_bandwidth.not_compared == [
        "barrier/barrier/comm float32 blocking 0B n=2 has no busbw_gbps (latency only); compare it on a time metric"
    ]


def test_threshold_raises_the_bar(tmp_path: Path) -> None:
    base = synth_run(tmp_path / "base.csv", CASES, seed=1)
    cand = synth_run(tmp_path / "cand.csv", _planted(1.2), seed=2)
    cli = _compare(str(base), str(cand), "--threshold", "25%")
    # Not a regression at 25%; but the one slowed size scatters its series too much to resolve 1.25x:
    # not a pass either (exit 5), with the resolution that says why.
    assert cli.exit_code == 5, cli.output
    assert "all_gather/flat: " in cli.output and "INCONCLUSIVE" in cli.output and "1 regression" not in cli.output


def test_rows_in_one_run_only_are_listed(tmp_path: Path) -> None:
    base = synth_run(tmp_path / "base.csv", CASES, seed=1)
    cand = synth_run(
        tmp_path / "cand.csv",
        [
            Case("all_gather", "flat", sizes=(8, 1024, 65536, 1 << 20, 1 << 22)),
            CASES[1],
            Case("sync_bn", "horovod", status="unavailable"),
        ],
        seed=2,
    )
    result = compare_runs(base, cand)
    assert len(result.only_baseline) == 4 and len(result.only_candidate) == 1
    cli = _compare(str(base), str(cand))
    assert cli.exit_code == 0
    assert (
        "only in the baseline (4 rows" in cli.output
        and "reduce_scatter_base/flat/comm float32 blocking 64K n=2" in cli.output
    )
    assert (
        "only in the candidate (1 rows" in cli.output and "all_gather/flat/comm float32 blocking 4M n=2" in cli.output
    )
    assert "sync_bn/horovod unavailable in the candidate: needs horovod" in cli.output


def test_wrong_results_in_the_candidate_fail(tmp_path: Path) -> None:
    base = synth_run(tmp_path / "base.csv", CASES[:1], seed=1)
    cand = synth_run(tmp_path / "cand.csv", [Case("all_gather", "flat", status="wrong")], seed=2)
    cli = _compare(str(base), str(cand))
    assert cli.exit_code == 1 and "wrong results" in cli.output


def test_runs_with_nothing_in_common_is_one_line(tmp_path: Path) -> None:
    base = synth_run(tmp_path / "base.csv", CASES, seed=1)
    cand = synth_run(tmp_path / "cand.csv", CASES, seed=2, world_size=4)
    assert_one_line_error(_compare(str(base), str(cand)), "no measured row in common", "world_size 2 vs 4")


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--threshold", "lots"], "malformed threshold 'lots'"),
        (["--metric", "speed"], "unknown metric 'speed'"),
        (["--alpha", "2"], "--alpha must lie between 0 and 1"),
    ],
)
def test_bad_options_are_one_line(tmp_path: Path, args: list[str], fragment: str) -> None:
    base = synth_run(tmp_path / "base.csv", CASES[:1], seed=1, raw=False)
    assert_one_line_error(_compare(str(base), str(base), *args), fragment)


def test_missing_baseline_is_one_line(tmp_path: Path) -> None:
    cand = synth_run(tmp_path / "cand.csv", CASES[:1], seed=1, raw=False)
    assert_one_line_error(_compare(str(tmp_path / "gone.csv"), str(cand)), "gone.csv does not exist")


def test_threshold_parsing() -> None:
    assert Threshold.parse("5%") == Threshold(0.05, True) and str(Threshold.parse("5%")) == "5%"
    assert Threshold.parse("20") == Threshold(20.0, False)
    assert Threshold.parse("2.5 %").exceeded(100.0, 103.0) and not Threshold.parse("2.5%").exceeded(100.0, 102.0)
    assert Threshold.parse("20").exceeded(100.0, 121.0) and not Threshold.parse("20").exceeded(100.0, 119.0)
    with pytest.raises(UserError):
        Threshold.parse("-5%")


def test_mann_whitney_separates_a_shift_from_noise() -> None:
    rng = random.Random(7)
    a = [round(rng.gauss(1.0, 0.2), 2) for _ in range(30)]  # rounded: ties happen
    same = [round(rng.gauss(1.0, 0.2), 2) for _ in range(25)]
    shifted = [round(rng.gauss(1.5, 0.2), 2) for _ in range(25)]
    assert mann_whitney_p(a, same) > 0.05 and mann_whitney_p(a, shifted) < 1e-6
    assert mann_whitney_p([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]) == pytest.approx(0.1)  # exact: 2 of 20 orderings
    assert mann_whitney_p([1.0] * 5, [1.0] * 5) == 1.0 and mann_whitney_p([], [1.0]) == 1.0


EIGHT_SIZES = tuple(1 << k for k in range(3, 27, 3))  # 8 B to 16 MB
NOISY_ROUNDS = {"rounds": 3, "round_sigma": 0.3, "raw": False}


def _series_cases(factor: float) -> list[Case]:
    return [Case(c.op, c.variant, factor=factor, sizes=EIGHT_SIZES) for c in CASES]


def test_a_slowdown_of_every_size_is_a_series_regression_when_the_rows_cannot_tell(tmp_path: Path) -> None:
    # Rounds that wander by 30%: no row alone separates 1.5x from that noise, but every size of
    # every series moved the same way.
    base = synth_run(tmp_path / "base.csv", _series_cases(1.0), seed=51, **NOISY_ROUNDS)
    cand = synth_run(tmp_path / "cand.csv", _series_cases(1.5), seed=52, **NOISY_ROUNDS)
    result = compare_runs(base, cand)
    assert result.count("regression") < len(result.deltas) / 2
    assert [s.verdict for s in result.shifts] == ["regression"] * 3 and result.failed
    assert all(s.sizes == len(EIGHT_SIZES) and 1.2 < s.ratio < 1.9 for s in result.shifts)
    cli = _compare(str(base), str(cand))
    assert cli.exit_code == 1 and "3 series regressions" in cli.output and "(8 sizes)" in cli.output


def test_noisy_runs_of_one_distribution_stay_clean_as_series(tmp_path: Path) -> None:
    for seed in range(5):
        base = synth_run(tmp_path / f"base{seed}.csv", _series_cases(1.0), seed=60 + 2 * seed, **NOISY_ROUNDS)
        cand = synth_run(tmp_path / f"cand{seed}.csv", _series_cases(1.0), seed=61 + 2 * seed, **NOISY_ROUNDS)
        result = compare_runs(base, cand)
        # Noisy rounds resolve only coarse changes: a series is unchanged or, where it resolves less
        # than its threshold, inconclusive; never a change.
        assert {s.verdict for s in result.shifts} <= {"unchanged", "within noise", "inconclusive"} and not result.failed


def test_the_series_threshold_is_the_second_guard(tmp_path: Path) -> None:
    base = synth_run(tmp_path / "base.csv", _series_cases(1.0), seed=51, **NOISY_ROUNDS)
    cand = synth_run(tmp_path / "cand.csv", _series_cases(1.5), seed=52, **NOISY_ROUNDS)
    # 2x: above the 1.5x planted, and coarser than what these noisy rounds resolve (1.55-1.89x), so
    # the series are judged unchanged, not inconclusive.
    assert {s.verdict for s in compare_runs(base, cand, Criteria(series_threshold=Threshold.parse("100%"))).shifts} == {
        "unchanged"
    }
    assert _compare(str(base), str(cand), "--series-threshold", "100%").exit_code == 0


def test_series_of_fewer_than_four_sizes_are_not_judged_as_a_whole(tmp_path: Path) -> None:
    three = [Case("all_gather", "flat", factor=f, sizes=(8, 1024, 65536)) for f in (1.0,)]
    base = synth_run(tmp_path / "base.csv", three, seed=1)
    cand = synth_run(tmp_path / "cand.csv", [Case("all_gather", "flat", factor=2.0, sizes=(8, 1024, 65536))], seed=2)
    result = compare_runs(base, cand)
    assert result.shifts == [] and result.count("regression") == 3


def test_an_absolute_series_threshold_is_one_line(tmp_path: Path) -> None:
    base = synth_run(tmp_path / "base.csv", CASES, seed=1)
    assert_one_line_error(_compare(str(base), str(base), "--series-threshold", "20"), "takes a percentage")


def test_a_row_must_stand_out_of_its_series_scatter(tmp_path: Path) -> None:
    # Tight rounds, but the second run landed up to 30% off at some sizes, either way (the machine
    # drifted between the runs, which no run's rounds can see): the sizes' scatter is the run-to-run
    # noise, and no row stands out of it. The same rows alone (Welch on the rounds) would be called.
    drift = {8: 1.25, 64: 0.8, 512: 1.1, 4096: 0.9, 32768: 1.3, 262144: 0.75, 2097152: 1.05, 16777216: 0.95}
    tight = {"rounds": 3, "round_sigma": 0.01, "raw": False}
    base = synth_run(tmp_path / "base.csv", [Case("all_gather", "flat", sizes=EIGHT_SIZES)], seed=71, **tight)
    moved = Case("all_gather", "flat", sizes=EIGHT_SIZES, factors_by_size=drift)
    cand = synth_run(tmp_path / "cand.csv", [moved], seed=72, **tight)
    result = compare_runs(base, cand)
    assert {d.verdict for d in result.deltas} <= {"unchanged", "within noise"} and not result.failed
    assert max(abs(d.change) for d in result.deltas) > 0.25
    # Sizes scattered 30% either way cannot resolve a 20% shift of the whole series: inconclusive, not passed.
    assert [s.verdict for s in result.shifts] == ["inconclusive"] and result.shifts[0].resolution > 1.2
