"""A results file whose last row was cut mid-line, as a run killed while writing leaves it: every
reader (compare, plot, report, model) names the partial row once and never counts it as a result."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from click.testing import CliRunner

from commbench.cli import main
from commbench.results.reader import split_records
from commbench.results.schema import COLUMNS
from tests.support.errors import assert_one_line_error
from tests.support.synth_results import Case, synth_run

CASES = [Case("all_gather", "flat"), Case("reduce_scatter_base", "flat")]
ROWS = 2 * 4  # two cases at synth_results' four sizes


def _cut_points(row: str) -> dict[str, int]:
    """Where to cut the last row: each cut gave a different failure before partial rows were found."""
    cells = next(csv.reader([row]))
    up_to = {c: len(",".join(cells[: COLUMNS.index(c)])) + 1 for c in ("size_bytes", "status", "note")}
    return {
        "first character": 1,
        "inside size_bytes (IntCastingNaNError)": up_to["size_bytes"] + 2,
        "before status (counted as 1 wrong)": up_to["status"],
        "inside a quoted note (EOF inside string)": up_to["note"] + 8,
        "last character missing": len(row) - 1,
    }


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, Path, str]:
    """a.csv complete; b.csv's text with a last row whose note is quoted (it holds a comma)."""
    a = synth_run(tmp_path / "a.csv", CASES, seed=1, raw=False)
    b = synth_run(tmp_path / "b.csv", CASES, seed=2, raw=False)
    lines = b.read_text().splitlines(keepends=True)
    cells = next(csv.reader([lines[-1]]))
    cells[COLUMNS.index("note")] = "noisy: mean interval 68% wide, rounds' means differ 2.31x"
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(cells)
    text = "".join(lines[:-1]) + buf.getvalue()
    b.write_text(text)
    return a, b, text


def _partial_named_once(output: str, path: Path) -> None:
    assert "Traceback" not in output
    assert output.count(f"commbench: warning: {path} ends in a partial row (line {ROWS + 1}): ignored") == 1, output


@pytest.mark.parametrize("where", list(_cut_points("x," * len(COLUMNS))))
def test_compare_ignores_a_partial_last_row_cut_anywhere(runs: tuple[Path, Path, str], where: str) -> None:
    a, b, text = runs
    last = text.splitlines()[-1]
    b.write_text(text[: len(text) - len(last) - 1] + last[: _cut_points(last)[where]])
    for args in ([a, b], [b, a]):
        # --threshold 10%: a series cut to 3 sizes is judged by its rows, which resolve ~1.06x (5% would be inconclusive)
        result = CliRunner().invoke(main, ["compare", "--threshold", "10%", *map(str, args)])
        assert result.exit_code == 0, result.output
        _partial_named_once(result.output, b)
        assert "wrong" not in result.output
        assert (
            f"# {ROWS - 1} unchanged; 1 row of {b} not judged (cut, malformed or impossible: named above); passed"
            in (result.output)
        )
        assert "# only in the baseline (1 rows" in result.output or "# only in the candidate (1 rows" in result.output


@pytest.mark.parametrize(
    "command",
    [
        # plot renders its charts in a pool of processes
        pytest.param(["plot", "-o", "{out}/charts/"], marks=pytest.mark.slow),
        ["report", "-o", "{out}/r.html"],
        ["model"],
    ],
)
def test_plot_report_and_model_ignore_a_partial_last_row(
    runs: tuple[Path, Path, str], tmp_path: Path, command: list[str]
) -> None:
    _, b, text = runs
    b.write_text(text[:-40])
    args = [c.format(out=tmp_path) for c in command]
    result = CliRunner().invoke(main, [args[0], str(b), *args[1:]])
    assert result.exit_code == 0, result.output
    _partial_named_once(result.output, b)


def test_a_file_cut_inside_its_header_is_one_line(tmp_path: Path) -> None:
    cut = tmp_path / "cut.csv"
    cut.write_text(",".join(COLUMNS)[:100])
    assert_one_line_error(CliRunner().invoke(main, ["model", str(cut)]), "ends inside its header line")


def test_split_records_finds_where_the_partial_record_starts() -> None:
    def split(text: str) -> tuple[list, int | None]:
        records = split_records(text)
        return [next(csv.reader(io.StringIO(row))) for _, row in records.rows], records.partial_line

    assert split("h,i\n1,2\n") == ([["1", "2"]], None)
    assert split("h,i\n1,2\n2,3") == ([["1", "2"]], 3)
    # a newline inside a quoted cell does not end the record; doubled quotes stay inside it
    assert split('h,i\n1,"a\nb ""c"" d"\n') == ([["1", 'a\nb "c" d']], None)
    assert split('h,i\n1,"a\nb ""c"" d"') == ([], 2)
    assert split('h,i\n1,"a\n') == ([], 2)
    assert split_records("h").partial_line == 1


def test_a_row_cut_in_the_middle_costs_only_itself() -> None:
    """A row cut inside a quoted cell once swallowed every row after it (its odd quote)."""
    records = split_records('h,i\n1,2\n3,"cut\n4,5\n6,"x, y"\n7,8\n')
    assert [(line, next(csv.reader(io.StringIO(row)))) for line, row in records.rows] == [
        (2, ["1", "2"]),
        (4, ["4", "5"]),
        (5, ["6", "x, y"]),
        (6, ["7", "8"]),
    ]
    assert [line for line, _ in records.malformed] == [3] and records.partial_line is None
    short = split_records("h,i\n1,2\n3\n4,5\n")
    assert [line for line, _ in short.rows] == [2, 4] and short.malformed == [
        (3, "a cut or malformed row (1 cells; the header has 2)")
    ]
