"""Result files with impossible values (a time negative, zero, NaN, inf or beyond a week; a size that
is no whole number of bytes or beyond 2^53) and rows cut in the middle of a file: each such row is named (file, line, column),
left out of every judgement (compare, plot, report, model, history import), the rows after it are
read, and a compare says how many rows it could not judge. Never a traceback, never a silent pass."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from click.testing import CliRunner

from commbench.cli import main
from commbench.history.query import list_runs
from commbench.history.store import open_history
from commbench.results.reader import read_one
from commbench.results.schema import COLUMNS
from tests.support.errors import assert_one_line_error
from tests.support.synth_results import Case, synth_run

CASES = [Case("all_gather", "flat"), Case("all_gather", "list"), Case("reduce_scatter_base", "flat")]
ROWS = 3 * 4  # three cases at synth_results' four sizes
IMPOSSIBLE = {  # name: (line, column, cell)
    "negative time": (3, "time_us_p50", "-12.5"),
    "zero time": (3, "time_us_p50", "0"),
    "size not a whole number": (4, "size_bytes", "1.5K"),
    "fractional size": (4, "size_bytes", "1024.5"),
    "NaN time": (5, "time_us_p50", "nan"),
    "inf time": (5, "time_us_max", "inf"),
    "text for a time": (6, "time_us_min", "fast"),
    "a size beyond 2^53": (4, "size_bytes", "1e30"),  # once an OverflowError from SQLite
    "a time beyond a week": (6, "time_us_max", "1e308"),
}


def _row(cells: list[str]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(cells)
    return buf.getvalue()


def _with_cell(source: Path, target: Path, line: int, column: str, cell: str) -> Path:
    lines = source.read_text().splitlines(keepends=True)
    cells = next(csv.reader([lines[line - 1]]))
    cells[COLUMNS.index(column)] = cell
    lines[line - 1] = _row(cells)
    target.write_text("".join(lines))
    return target


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, Path]:
    return (
        synth_run(tmp_path / "good.csv", CASES, seed=1, raw=False),
        synth_run(tmp_path / "cand.csv", CASES, seed=2, raw=False),
    )


def _named_once(output: str, path: Path, line: int, column: str) -> None:
    assert "Traceback" not in output, output
    named = [
        x for x in output.splitlines() if x.startswith(f"commbench: warning: {path} line {line}, column {column}:")
    ]
    assert len(named) == 1 and named[0].endswith("row left out"), output


@pytest.mark.parametrize("case", list(IMPOSSIBLE))
def test_compare_names_an_impossible_row_leaves_it_out_and_says_so(runs, tmp_path, case):
    good, cand = runs
    line, column, cell = IMPOSSIBLE[case]
    bad = _with_cell(cand, tmp_path / "bad.csv", line, column, cell)
    for args in ([good, bad], [bad, good]):
        # --threshold 10%: a series cut to 3 sizes is judged by its rows, which resolve ~1.06x (5% would be inconclusive)
        result = CliRunner().invoke(main, ["compare", "--threshold", "10%", *map(str, args)])
        assert result.exit_code == 0, result.output
        _named_once(result.output, bad, line, column)
        assert f"1 row of {bad} not judged (cut, malformed or impossible: named above); passed" in result.output
        assert f"# {ROWS - 1} unchanged;" in result.output


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["plot", "-o", "{out}/charts/"], marks=pytest.mark.slow),  # plot draws in a process pool
        ["report", "-o", "{out}/r.html"],
        ["model"],
    ],
)
def test_plot_report_and_model_leave_an_impossible_row_out(runs, tmp_path, command):
    _, cand = runs
    bad = _with_cell(cand, tmp_path / "bad.csv", 3, "time_us_p50", "-1")
    args = [c.format(out=tmp_path) for c in command]
    result = CliRunner().invoke(main, [args[0], str(bad), *args[1:]])
    assert result.exit_code == 0, result.output
    _named_once(result.output, bad, 3, "time_us_p50")


@pytest.mark.parametrize("size", ["1.5K", "-8", "8.5", "1000000000000000000000000000000"])
def test_history_import_files_only_the_possible_rows(runs, tmp_path, size):
    _, cand = runs
    bad = _with_cell(cand, tmp_path / "bad.csv", 4, "size_bytes", size)
    result = CliRunner().invoke(main, ["history", "import", str(bad), "--history", str(tmp_path / "h.sqlite")])
    assert result.exit_code == 0, result.output
    _named_once(result.output, bad, 4, "size_bytes")
    history = open_history(str(tmp_path / "h.sqlite"), create=False)
    assert list_runs(history)[0]["rows"] == ROWS - 1
    history.close()


def test_a_file_of_impossible_rows_only_is_refused_in_one_line(tmp_path):
    path = synth_run(tmp_path / "one.csv", [Case("all_gather", "flat", sizes=(1024,))], seed=1, raw=False)
    _with_cell(path, path, 2, "time_us_p50", "-3")
    _refused(CliRunner().invoke(main, ["model", str(path)]), f"{path} line 2, column time_us_p50")


def _refused(result, named: str) -> None:
    """Exit 2: the row named in its warning, then the one error line; no traceback."""
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    *warnings, error = result.output.splitlines()
    assert len(warnings) == 1 and named in warnings[0], result.output
    assert error.startswith("commbench: error:") and "holds no usable row (1 cut, malformed or impossible" in error


def test_a_row_cut_in_the_middle_is_named_and_the_rows_after_it_are_read(runs, tmp_path):
    """Issue 34 item 6: a row cut inside its quoted note, then the rest of the file, once left 4 of
    24 rows and a compare that "passed"."""
    good, cand = runs
    lines = cand.read_text().splitlines(keepends=True)
    cells = next(csv.reader([lines[5]]))
    cells[COLUMNS.index("note")] = "noisy: mean interval 68% wide, rounds differ"
    whole = _row(cells)
    lines[5] = whole[: whole.index('"noisy') + 10] + "\n"  # line 6, cut inside the quoted note
    midcut = tmp_path / "midcut.csv"
    midcut.write_text("".join(lines))
    assert len(read_one(midcut)) == ROWS - 1
    result = CliRunner().invoke(main, ["compare", "--threshold", "10%", str(good), str(midcut)])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert f"commbench: warning: {midcut} line 6: a cut or malformed row" in result.output
    assert f"# {ROWS - 1} unchanged; 1 row of {midcut} not judged" in result.output
    assert "# only in the baseline (1 rows" in result.output


def test_one_line_error_when_every_row_is_cut(tmp_path):
    path = tmp_path / "cut.csv"
    path.write_text(",".join(COLUMNS) + "\n2,abc\n")
    _refused(CliRunner().invoke(main, ["model", str(path)]), f"{path} line 2: a cut or malformed row (2 cells")


@pytest.mark.parametrize("command", ["compare", "report", "model", "history import"])
def test_a_file_that_is_no_results_csv_is_one_line_without_its_rows_listed(tmp_path, command):
    """Prose given as a results file: its lines are no malformed rows of ours to name one by one."""
    prose = tmp_path / "notes.csv"
    prose.write_text("# notes\n\nsome, prose, here\nand, more\na, b, c, d\n")
    args = [*command.split(), str(prose)] + ([str(prose)] if command == "compare" else [])
    assert_one_line_error(CliRunner().invoke(main, args), "not a commbench results CSV", exit_code=2)
