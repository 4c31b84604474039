"""No command destroys a file (issue: every command that writes refuses what is not its own to
replace): history trend, report, plot and sweep refuse a FIFO, a link to one, an input, an existing
file without --overwrite; a shipped example's charts are left alone. And the small interface rules
that go with it: one --history spelling, an empty --op/--dtype/--history refused, duplicates once,
.raw.csv files skipped by import, every key column that splits a trend able to narrow it.

Run as root. A FIFO and links in a temporary folder stand for device nodes; the tracked example CSV
is only read (copied into the temporary folder first).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from commbench.cli import main
from commbench.cli.history import TREND_FILTERS
from commbench.cli.options import split_names
from commbench.errors import UserError
from commbench.results.schema import SERIES_KEY
from tests.support.errors import assert_one_line_error

EXAMPLE = Path(__file__).resolve().parents[2] / "results" / "example"


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def example(tmp_path: Path) -> Path:
    """A copy of the shipped example run and its charts, and a history holding it."""
    shutil.copytree(EXAMPLE, tmp_path / "example")
    csv = tmp_path / "example" / "sweep-gloo-n2.csv"
    done = _invoke("history", "import", str(csv), "--history", str(tmp_path / "h.sqlite"))
    assert done.exit_code == 0, done.output
    return csv


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_history_trend_replaces_nothing_it_did_not_write(example: Path, tmp_path: Path) -> None:
    trend = ["history", "trend", "--op", "all_gather", "--variant", "flat", "--history", str(tmp_path / "h.sqlite")]
    victim = tmp_path / "victim.csv"
    victim.write_text("a,b\n1,2\n")
    assert_one_line_error(_invoke(*trend, "-o", str(victim)), "a png chart's file name ends in .png", exit_code=2)
    fifo = tmp_path / "full.png"
    os.mkfifo(fifo)
    (tmp_path / "link.png").symlink_to(fifo)
    assert_one_line_error(_invoke(*trend, "-o", str(fifo)), "is a FIFO, not a regular file", exit_code=2)
    assert_one_line_error(_invoke(*trend, "-o", str(tmp_path / "link.png")), "is a symbolic link", exit_code=2)
    assert fifo.is_fifo() and victim.read_text() == "a,b\n1,2\n"
    chart = tmp_path / "t.png"
    assert _invoke(*trend, "-o", str(chart)).exit_code == 0 and chart.read_bytes()[:4] == b"\x89PNG"
    assert_one_line_error(_invoke(*trend, "-o", str(chart)), "already exists", "--overwrite", exit_code=2)
    assert _invoke(*trend, "-o", str(chart), "--overwrite").exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary left


def test_report_never_writes_into_its_input_nor_over_a_file(example: Path, tmp_path: Path) -> None:
    before = example.read_bytes()
    for overwrite in ((), ("--overwrite",)):
        assert_one_line_error(
            _invoke("report", str(example), "-o", str(example), *overwrite), "one of this command's inputs", exit_code=2
        )
    assert example.read_bytes() == before
    kept = tmp_path / "old.html"
    kept.write_text("keep me")
    assert_one_line_error(_invoke("report", str(example), "-o", str(kept)), "already exists", exit_code=2)
    assert kept.read_text() == "keep me"


def test_plotting_the_shipped_example_leaves_its_charts_alone(example: Path) -> None:
    charts = example.with_name("sweep-gloo-n2-charts")
    before = _digest(charts)
    assert_one_line_error(_invoke("plot", str(example)), "already exist", "--overwrite", exit_code=2)
    assert _digest(charts) == before


def test_sweep_refuses_what_cannot_be_a_results_file_before_any_rank(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    (tmp_path / "null.csv").symlink_to(fifo)  # stands for `-o /dev/null`
    sweep = ["sweep", "--op", "all_gather", "--sizes", "8", "--no-plot"]
    assert_one_line_error(_invoke(*sweep, "--overwrite", "-o", str(fifo)), "not a regular file", exit_code=2)
    assert_one_line_error(
        _invoke(*sweep, "--overwrite", "-o", str(tmp_path / "null.csv")), "is a symbolic link", exit_code=2
    )
    assert_one_line_error(
        _invoke(*sweep, "-o", str(tmp_path / ("x" * 300 + ".csv"))), "File name too long", exit_code=2
    )
    assert_one_line_error(_invoke(*sweep, "-o", "-"), "--output - is not supported", exit_code=2)
    assert_one_line_error(
        _invoke(*sweep, "-o", str(tmp_path / "a.csv"), "--history", ""), "--history is empty", exit_code=2
    )
    assert_one_line_error(
        _invoke(*sweep, "-o", str(tmp_path / "a.csv"), "--history", str(fifo)), "is a FIFO", exit_code=2
    )
    assert_one_line_error(_invoke("sweep", "--op", "", "-o", str(tmp_path / "a.csv")), "--op is empty", exit_code=2)
    assert_one_line_error(
        _invoke(*sweep, "--dtype", ",", "-o", str(tmp_path / "a.csv")), "--dtype is empty", exit_code=2
    )
    (tmp_path / "b.env.json").write_text("{}")  # a sidecar that is not this run's to replace
    assert_one_line_error(_invoke(*sweep, "-o", str(tmp_path / "b.csv")), "b.env.json already exists", exit_code=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.env.json", "fifo.csv", "null.csv"]


def test_repeated_names_count_once_and_an_empty_one_is_refused() -> None:
    assert split_names(("all_gather,broadcast", "all_gather", " broadcast "), "--op") == ("all_gather", "broadcast")
    with pytest.raises(UserError, match="--op is empty"):
        split_names(("all_gather", " "), "--op")


def test_one_history_spelling_on_every_command(tmp_path: Path) -> None:
    commands = [["sweep"], ["syncbn"], ["compare"], *(["history", c] for c in ("list", "show", "trend", "import"))]
    for command in commands:
        help_text = " ".join(_invoke(*command, "--help").output.split())
        assert "--history" in help_text and "results/history.sqlite in the current folder" in help_text, command
    assert "--no-history" not in _invoke("history", "list", "--help").output
    down = _invoke("history", "list", "--history", "postgresql://u@127.0.0.1:9/h")
    assert "--no-history" not in down.output and "give --history another" in down.output, down.output
    assert_one_line_error(_invoke("compare", "--history", "new.csv"), "`commbench compare new.csv`", exit_code=2)
    assert_one_line_error(_invoke("history", "list", "--history", ""), "--history is empty", exit_code=2)


def test_import_skips_samples_files_with_a_note(example: Path, tmp_path: Path) -> None:
    raw = example.with_name("sweep-gloo-n2.raw.csv")
    raw.write_text("run_id,op\n")
    done = CliRunner().invoke(
        main, ["history", "import", str(example), str(raw), "--history", str(tmp_path / "i.sqlite")]
    )
    assert done.exit_code == 0, done.output
    assert "# skipped 1 per-iteration samples file" in done.output and "imported 1 run" in done.output
    only_raw = _invoke("history", "import", str(raw), "--history", str(tmp_path / "i.sqlite"))
    assert only_raw.exit_code == 2 and "give the results CSVs" in only_raw.output
    before = example.read_bytes()
    into_input = _invoke("history", "import", str(example), "--history", str(example))
    assert_one_line_error(into_input, "--history", "is one of this command's inputs", exit_code=2)
    assert example.read_bytes() == before


def test_every_column_that_splits_a_trend_can_narrow_it(example: Path, tmp_path: Path) -> None:
    assert set(TREND_FILTERS) == set(SERIES_KEY) - {"op"}
    intra = tmp_path / "intra.csv"
    frame = pd.read_csv(example)
    frame["group"], frame["run_id"] = "intra", "intra-run"
    frame.to_csv(intra, index=False)
    history = str(tmp_path / "h.sqlite")
    assert _invoke("history", "import", str(intra), "--history", history).exit_code == 0
    trend = ["history", "trend", "--op", "all_gather", "--variant", "flat", "--history", history]
    assert_one_line_error(_invoke(*trend, "-o", str(tmp_path / "t.png")), "group intra, world", "--group", exit_code=2)
    narrowed = _invoke(*trend, "--group", "intra", "-o", str(tmp_path / "t.png"))
    assert narrowed.exit_code == 0 and "1 runs" in narrowed.output, narrowed.output


def test_one_function_says_where_the_history_is() -> None:
    from commbench.history.store import NO_HISTORY, history_folder, history_location

    assert history_location(None) == str(Path("results") / "history.sqlite")  # whatever folder -o names
    assert history_location("team.sqlite") == "team.sqlite" and history_location(NO_HISTORY) is None
    assert history_folder("postgresql://u@db.example:5432/h") == Path("results")  # trend's default, as its help says
    assert history_folder("/data/h.sqlite") == Path("/data")
