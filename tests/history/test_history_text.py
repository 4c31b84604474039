"""What a history prints is text anyone could have written (a CSV's host names and command, an
nccl-tests file, a shared database): `history list` and `history show` print it with every
control character escaped, so no host name forges a line of its own or redraws the terminal."""

from __future__ import annotations

import csv
from pathlib import Path

from click.testing import CliRunner

from commbench.cli import main
from tests.support.synth_results import Case, synth_run

FORGED = "nccl00000000  2026-01-01 00:00:00      1s  complete"
HOST = f"gpu-a\n{FORGED}\x1b[2J\u2028x"


def _imported(tmp_path: Path, **cells: str) -> str:
    """A CSV whose every row has these cells, filed in a new history; the history's path."""
    path = synth_run(tmp_path / "run.csv", [Case("all_gather", "flat")], seed=1, raw=False, host=HOST)
    with path.open(newline="") as file:
        rows = list(csv.DictReader(file))
    with path.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows({**row, **cells} for row in rows)
    db = str(tmp_path / "h.sqlite")
    result = CliRunner().invoke(main, ["history", "import", str(path), "--history", db])
    assert result.exit_code == 0, result.output
    return db


def _no_forged_line(output: str) -> None:
    assert not any(line.startswith("nccl00000000") for line in output.splitlines()), output
    assert "\x1b" not in output and "\u2028" not in output, output


def test_a_host_name_holding_a_newline_forges_no_line_in_list_or_show(tmp_path):
    db = _imported(tmp_path, command=f"commbench sweep\n{FORGED}")
    listing = CliRunner().invoke(main, ["history", "list", "--history", db])
    assert listing.exit_code == 0, listing.output
    _no_forged_line(listing.output)
    assert len(listing.output.splitlines()) == 3  # the title, the header, the run
    assert f"commbench sweep\\n{FORGED}" in listing.output
    shown = CliRunner().invoke(main, ["history", "show", "run1", "--history", db])
    assert shown.exit_code == 0, shown.output
    _no_forged_line(shown.output)
    assert f"# host gpu-a\\n{FORGED}\\x1b[2J\\u2028x" in shown.output


def test_a_start_or_end_that_is_no_time_shows_as_unknown(tmp_path):
    db = _imported(tmp_path, timestamp="not a time")
    listing = CliRunner().invoke(main, ["history", "list", "--history", db])
    assert listing.exit_code == 0 and "Traceback" not in listing.output, listing.output
    started, took = listing.output.splitlines()[2].split()[1:4], listing.output.splitlines()[2].split()[4]
    assert started == ["not", "a", "time"] and took == "-"
