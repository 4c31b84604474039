"""commbench model: the robust Hockney fit, the projections' arithmetic, and one-line refusals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from commbench.analysis.model import ALGORITHMS, Fit, fit_frame, fit_hockney, project
from commbench.cli import main
from commbench.results.reader import read_results
from tests.support.errors import assert_one_line_error
from tests.support.synth_results import Case, synth_run

# synth_results' model: 100 us + S / 2 GB/s. A quarter-octave sweep, 8 B to 64 MB: 93 sizes.
SIZES = tuple(sorted({round(8 * 2 ** (k / 4)) for k in range(93)}))


def _fitted(tmp_path: Path, **case: object) -> Fit:
    # One iteration per row: each p50 carries the full 5% log-normal noise of a sample.
    path = synth_run(
        tmp_path / "run.csv", [Case("all_gather", "flat", sizes=SIZES, **case)], seed=3, iters=1, raw=False
    )
    fits, _ = fit_frame(read_results([path]))
    assert len(fits) == 1
    return fits[0]


def test_the_fit_recovers_alpha_and_beta_from_noisy_rows(tmp_path: Path):
    fit = _fitted(tmp_path)
    assert fit.alpha_us == pytest.approx(100.0, rel=0.02) and fit.beta_gbps == pytest.approx(2.0, rel=0.02)
    assert fit.fits and fit.r2 > 0.99 and fit.sizes == len(SIZES)
    assert fit.half_size_bytes == pytest.approx(100e-6 * 2e9, rel=0.03)


def test_one_row_ten_times_off_does_not_pull_the_line(tmp_path: Path):
    fit = _fitted(tmp_path, factors_by_size={SIZES[40]: 10.0})
    assert fit.alpha_us == pytest.approx(100.0, rel=0.02) and fit.beta_gbps == pytest.approx(2.0, rel=0.02)
    assert fit.worst_residual > 0.85  # the outlier is still reported: |10t - t| / 10t


def test_the_line_is_fitted_to_the_p50s_which_a_slow_mode_does_not_move(tmp_path: Path):
    # 30% of each size's iterations 1.5x to 4.5x slower, by a factor that changes from size to size:
    # the means are no line in S; the p50s, in the fast mode, are the line 100 us + S / 2 GB/s.
    slow = {size: 1.5 + (i % 4) for i, size in enumerate(SIZES)}
    path = synth_run(
        tmp_path / "run.csv",
        [Case("all_gather", "flat", sizes=SIZES, slow_by_size=slow)],
        seed=3,
        sigma=0.01,
        raw=False,
    )
    (fit,) = fit_frame(read_results([path]))[0]
    assert fit.alpha_us == pytest.approx(100.0, rel=0.02) and fit.beta_gbps == pytest.approx(2.0, rel=0.02)
    assert fit.fits and fit.worst_residual < 0.05


def test_exact_points_give_exact_parameters_and_interval_weights_are_used():
    sizes = np.array([8, 1024, 1 << 16, 1 << 20, 1 << 24], dtype=float)
    times = 50.0 + sizes / 4e3  # 50 us, 4 GB/s
    alpha, beta, r2, worst = fit_hockney(sizes, times)
    assert (alpha, beta) == pytest.approx((50.0, 4.0), rel=1e-9) and r2 == pytest.approx(1.0) and worst < 1e-9
    disturbed = times.copy()
    disturbed[-1] *= 1.5
    loose = fit_hockney(sizes, disturbed, sigma_us=np.array([1, 1, 1, 1, 1e6]))  # its interval is huge
    assert loose[1] == pytest.approx(4.0, rel=0.01)


def _fit(op: str, n: int, alpha: float = 100.0, beta: float = 2.0) -> Fit:
    return Fit(("run", op, "flat", "comm", "float32", "blocking", "gloo", n, "world"), 8, alpha, beta, 1.0, 0.0)


@pytest.mark.parametrize("n", [2, 8, 64])
def test_ring_all_gather_projection_by_hand(n: int):
    # Fitted at p=2: alpha = (2-1) a -> a = 100 us; 1/beta = (1/2) b -> b = 1e-3 us per byte.
    p = project(_fit("all_gather", 2), "ring", n, 1 << 20)
    assert p.alpha_us == pytest.approx((n - 1) * 100.0)
    assert p.beta_gbps == pytest.approx(1.0 / ((n - 1) / n * 1e-3 * 1e3))
    assert p.time_us_at_max == pytest.approx((n - 1) * 100.0 + (n - 1) / n * (1 << 20) * 1e-3)


@pytest.mark.parametrize("n, lg", [(2, 1), (8, 3), (64, 6)])
def test_tree_projections_by_hand(n: int, lg: int):
    # Rabenseifner all_reduce fitted at p=4: alpha = 2 lg4 a = 4a; 1/beta = 2 (3/4) b.
    p = project(_fit("all_reduce", 4, alpha=80.0, beta=1.5), "tree", n, 4096)
    assert p.alpha_us == pytest.approx(2 * lg * 20.0)
    b = 1 / (1.5e3) / 1.5  # us per byte of the link
    assert p.time_us_at_max == pytest.approx(2 * lg * 20.0 + 2 * (n - 1) / n * 4096 * b)
    # binomial broadcast fitted at p=8: lg8 = 3 for both terms.
    q = project(_fit("broadcast", 8, alpha=300.0, beta=1.0), "tree", n, 1000)
    assert q.alpha_us == pytest.approx(lg * 100.0) and q.beta_gbps == pytest.approx(3.0 / lg)


def test_no_projection_without_a_formula_or_a_fit():
    assert "no formula" in project(_fit("grouped_all_gather", 2), "ring", 8, 1)
    poor = Fit(("r", "all_gather", "flat", "comm", "float32", "blocking", "gloo", 2, "world"), 8, 100.0, 2.0, 0.5, 0.9)
    assert "does not fit" in project(poor, "ring", 8, 1)
    assert set(ALGORITHMS) == {"ring", "tree"}


def test_cli_prints_fits_projections_json_and_charts(tmp_path: Path):
    path = synth_run(tmp_path / "run.csv", [Case("all_gather", "flat", sizes=SIZES[::6])], seed=1, iters=5, raw=False)
    result = CliRunner().invoke(main, ["model", str(path), "--predict-n", "4,8"])
    assert result.exit_code == 0, result.output
    assert "alpha(µs)" in result.output and "a MODEL, not a measurement" in result.output
    assert (tmp_path / "run-model" / "all_gather-comm-model.png").exists()
    document = json.loads(CliRunner().invoke(main, ["model", str(path), "--predict-n", "8", "--json"]).output)
    (fit,) = document["fits"]
    assert fit["op"] == "all_gather" and math.isclose(fit["beta_gbps"], 2.0, rel_tol=0.05)
    assert [row["world_size"] for row in document["projections"]["rows"]] == [8]


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--algorithm", "butterfly"], "unknown algorithm 'butterfly'"),
        (["--predict-n", "1"], "--predict-n '1' is not a world size"),
        (["--predict-n", "lots"], "--predict-n 'lots'"),
    ],
)
def test_bad_options_are_one_line(tmp_path: Path, args: list[str], fragment: str):
    path = synth_run(tmp_path / "run.csv", [Case("all_gather", "flat")], seed=1, raw=False)
    assert_one_line_error(CliRunner().invoke(main, ["model", str(path), *args]), fragment)


def test_unusable_input_is_one_line(tmp_path: Path):
    one_size = synth_run(tmp_path / "one.csv", [Case("all_gather", "flat", sizes=(1024,))], seed=1, raw=False)
    assert_one_line_error(CliRunner().invoke(main, ["model", str(one_size)]), "a fit needs 4 or more sizes")
    other = tmp_path / "other.csv"
    other.write_text("name,value\na,1\n")
    assert_one_line_error(CliRunner().invoke(main, ["model", str(other)]), "not a commbench results CSV")


def test_times_that_do_not_grow_with_size_print_and_serialise_without_a_beta(tmp_path: Path):
    # The larger sizes ran faster (a noisy few sizes of latency-bound collectives): no slope, so
    # beta and n1/2 are infinite, printed as "-" and written to JSON as null.
    shrinking = {8: 1.3, 64: 1.2, 512: 1.1, 4096: 1.0}
    case = Case("all_gather", "flat", sizes=tuple(shrinking), factors_by_size=shrinking)
    path = synth_run(tmp_path / "run.csv", [case], seed=1, iters=5, raw=False, sigma=0.0)
    result = CliRunner().invoke(main, ["model", str(path)])
    assert result.exit_code == 0, result.output
    (line,) = [row for row in result.output.splitlines() if row.startswith("  all_gather/flat")]
    assert line.split()[7:9] == ["-", "-"]  # beta, n1/2
    (fit,) = json.loads(CliRunner().invoke(main, ["model", str(path), "--json"]).output)["fits"]
    assert fit["beta_gbps"] is None and fit["half_size_bytes"] is None
