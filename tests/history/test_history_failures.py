"""A history that cannot be used is one line and exit 2 that says what to do, never a traceback; a
broken default history never stops a sweep; a run whose database went down mid-way is completed
by `history import` of its CSV."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from commbench.cli import main
from commbench.history.importer import import_csvs, summary
from commbench.history.query import baseline_runs, list_runs, run_rows
from commbench.history.recorder import RunInfo, RunRecorder, now
from commbench.history.store import open_history
from tests.support.distributed import commbench
from tests.support.errors import assert_one_line_error, assert_sweep_refuses
from tests.support.synth_results import Case, synth_run

SWEEP = ["--op", "all_gather", "--variant", "flat", "--sizes", "1K", "-n", "3", "--no-plot"]


def _damaged_histories(tmp_path: Path) -> dict[str, Path]:
    """A real history cut in half (a copy interrupted, a full disk), one with pages overwritten, and
    bytes that were never SQLite."""
    good = tmp_path / "good.sqlite"
    csv = synth_run(tmp_path / "run.csv", [Case("all_gather", "flat", sizes=(1024, 4096))], seed=1, raw=False)
    history = open_history(str(good))
    import_csvs(history, [csv])
    history.close()  # the last connection closing moves the WAL into the file
    data = good.read_bytes()
    damaged = {"cut": data[: len(data) // 2], "overwritten": data[:4096] + b"\xff" * (len(data) - 4096)}
    damaged["not sqlite"] = bytes(range(256)) * 20
    paths = {}
    for name, content in damaged.items():
        paths[name] = tmp_path / f"{name.replace(' ', '_')}.sqlite"
        paths[name].write_bytes(content)
    return paths


def test_a_damaged_history_is_one_line_for_every_command_and_refuses_a_sweep_before_its_ranks(tmp_path):
    for name, path in _damaged_histories(tmp_path).items():
        listed = CliRunner().invoke(main, ["history", "list", "--history", str(path)])
        what = "not a commbench history" if name == "not sqlite" else "is damaged (database disk image is malformed)"
        assert_one_line_error(listed, str(path), what, exit_code=2)
        # Checked by the launching process: no rank was started ("# starting" is never printed).
        assert_sweep_refuses([*SWEEP, "--history", str(path), "-o", str(tmp_path / f"{path.stem}.csv")], what)
        assert not (tmp_path / f"{path.stem}.csv").exists()


def test_a_url_whose_port_is_not_a_number_is_one_line_without_its_password(tmp_path):
    url = "postgresql://u:pw9@127.0.0.1:notaport/db"
    result = CliRunner().invoke(main, ["history", "list", "--history", url])
    assert_one_line_error(result, "port is not a number", "u:***@127.0.0.1:notaport", exit_code=2)
    assert "pw9" not in result.output
    assert_sweep_refuses([*SWEEP, "--history", url, "-o", str(tmp_path / "a.csv")], "port is not a number")


@pytest.mark.slow
def test_without_the_postgresql_driver_a_url_says_which_extra_to_install(tmp_path):
    """psycopg hidden from a real `commbench` process (a sitecustomize that makes importing it fail,
    as when it is not installed), not uninstalled."""
    (tmp_path / "sitecustomize.py").write_text('import sys\nsys.modules["psycopg"] = sys.modules["psycopg2"] = None\n')
    env = {"PYTHONPATH": f"{tmp_path}:{Path(__file__).resolve().parents[2]}"}
    for url in ("postgresql://u@127.0.0.1:9/db", "postgresql+psycopg2://u@127.0.0.1:9/db"):
        for args in (["history", "list", "--history", url], ["sweep", *SWEEP, "--history", url, "-o", "x.csv"]):
            proc = commbench(*args, env=env, cwd=tmp_path)
            lines = [line for line in proc.stderr.splitlines() if line.strip()]
            assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
            assert "pip install 'commbench[postgresql]'" in lines[0]
    assert not (tmp_path / "x.csv").exists()


@pytest.mark.slow
def test_a_broken_default_history_never_stops_a_sweep(tmp_path, monkeypatch):
    """The default history is results/history.sqlite in the folder the command runs from."""
    monkeypatch.delenv("COMMBENCH_HISTORY")  # the tests' own default (tests/conftest.py): this one is the real one
    damaged = _damaged_histories(tmp_path)["cut"]
    (tmp_path / "out").mkdir()
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "history.sqlite").write_bytes(damaged.read_bytes())
    done = commbench("sweep", *SWEEP, "-o", str(tmp_path / "out" / "a.csv"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "not filed in its default history" in warnings[0], done.stderr
    assert "is damaged" in warnings[0] and "Traceback" not in done.stderr
    assert len((tmp_path / "out" / "a.csv").read_text().splitlines()) == 2  # the header and its one row
    assert (tmp_path / "results" / "history.sqlite").read_bytes() == damaged.read_bytes()  # left as it was


def _lost_midway(target: str, csv: Path, kept: int) -> None:
    """What a live run of `csv` leaves in its history when the database goes down after `kept` rows:
    its record, still incomplete (end() never reached the database), and its first rows."""
    import pandas as pd

    cells = pd.read_csv(csv, dtype=str, keep_default_na=False)
    first = cells.iloc[0]
    history = open_history(target)
    run = RunInfo(
        run_id=first.run_id,
        fingerprint=first.fingerprint,
        kind="sweep",
        command=first.command,
        backend=first.backend,
        world_size=int(first.world_size),
        hosts=("testhost",),
        source=str(csv),
        commbench_version="0.1.0",
        provenance={"hosts": [], "differences": []},
        started_at=now(),
    )
    recorder = RunRecorder(history, run)
    for row in cells.to_dict("records")[:kept]:
        recorder.add(row)
    history.close()


def test_import_completes_a_run_whose_database_went_down_midway_once(target, tmp_path):
    csv = synth_run(tmp_path / "run.csv", [Case("all_gather", "flat"), Case("all_gather", "list")], seed=2, raw=False)
    total = len(csv.read_text().splitlines()) - 1
    _lost_midway(target, csv, kept=2)
    history = open_history(target, create=False)
    (before,) = list_runs(history)
    assert (before["status"], before["rows"]) == ("incomplete", 2)
    done = import_csvs(history, [csv])
    assert summary(done, "h").endswith(
        f"completed run run2 from its CSV: the history had 2 of its {total} rows, {total - 2} added"
    )
    (after,) = list_runs(history)
    assert (after["status"], after["rows"]) == ("recovered", total)
    rows = run_rows(history, [after["run_id"]])
    assert len(rows.drop_duplicates(["op", "variant", "size_bytes"])) == total  # each row once
    assert baseline_runs(history, after["fingerprint"], None, None, 5)[0]["run_id"] == "run2"  # a whole run
    again = import_csvs(history, [csv])
    assert not again[0].added and not again[0].recovered and "there already" in summary(again, "h")
    assert list_runs(history)[0]["rows"] == total
    history.close()
