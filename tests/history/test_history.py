"""The results history on real databases: a SQLite file always, and a real PostgreSQL server (a
throwaway one, tests/support/postgres_server.py) where it can run. The same tests run on both: appending,
two writers in two processes at once, a killed run, importing CSVs, migrating a version-1 history."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from commbench.errors import UserError
from commbench.history.importer import import_csvs
from commbench.history.query import find_run, list_runs, run_rows
from commbench.history.recorder import RunInfo, RunRecorder, now
from commbench.history.store import HISTORY_ENV, HISTORY_SCHEMA, META, open_history
from tests.support.distributed import REPO
from tests.support.synth_results import Case, synth_run


def _run(run_id: str, hosts=("h1",), fingerprint: str = "fp1", started: str | None = None) -> RunInfo:
    return RunInfo(
        run_id=run_id,
        fingerprint=fingerprint,
        kind="sweep",
        command=f"commbench sweep --test {run_id}",
        backend="gloo",
        world_size=2,
        hosts=hosts,
        source=f"/tmp/{run_id}.csv",
        commbench_version="0.1.0",
        provenance={"fingerprint": fingerprint, "hosts": [{"host": h} for h in hosts], "differences": []},
        started_at=started or now(),
    )


def _row(size: int, p50: float = 100.0) -> dict:
    return {
        "schema_version": 2,
        "op": "all_gather",
        "variant": "flat",
        "phase": "comm",
        "dtype": "float32",
        "mode": "blocking",
        "size_bytes": size,
        "world_size": 2,
        "group": "world",
        "backend": "gloo",
        "time_us_min": p50 * 0.9,
        "time_us_p50": p50,
        "time_us_p50_lo": p50 * 0.95,
        "time_us_p50_hi": p50 * 1.05,
        "time_us_p95": p50 * 1.2,
        "time_us_max": p50 * 1.5,
        "time_us_std": 1.0,
        "time_us_p50_rounds": f"{p50};{p50 * 1.01};{p50 * 0.99}",
        "busbw_gbps": 1.0,
        "status": "ok",
    }


def test_a_run_appends_its_rows_and_completes(target):
    history = open_history(target)
    recorder = RunRecorder(history, _run("run-a", hosts=("h1", "h2")))
    for size in (8, 64, 512):
        recorder.add({**_row(size), "run_id": "run-a"})
    recorder.end(completed=True)
    (run,) = list_runs(history)
    assert (run["run_id"], run["status"], run["rows"], run["hosts"]) == ("run-a", "complete", 3, "h1;h2")
    assert run["ended_at"] >= run["started_at"]
    rows = run_rows(history, ["run-a"])
    assert list(rows["size_bytes"]) == [8, 64, 512] and list(rows["time_us_p50"]) == [100.0] * 3
    assert list(rows["time_us_p50_rounds"]) == [_row(8)["time_us_p50_rounds"]] * 3  # as the sink gave it
    assert [r["run_id"] for r in list_runs(history, host="h2")] == ["run-a"]
    assert list_runs(history, host="h3") == [] and list_runs(history, op="reduce") == []
    assert find_run(history, "run-")["provenance"]["hosts"] == [{"host": "h1"}, {"host": "h2"}]
    with pytest.raises(UserError, match="no run 'nope'"):
        find_run(history, "nope")
    recorder.close()


WRITER = """
import sys
from commbench.history.recorder import RunRecorder
from commbench.history.store import open_history
from tests.history.test_history import _row, _run
target, run_id, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
recorder = RunRecorder(open_history(target), _run(run_id))
print("ready", flush=True)
for i in range(rows):
    recorder.add({**_row(8 * (i + 1)), "run_id": run_id})
recorder.end(completed=rows > 0)
"""


def _writer(target: str, run_id: str, rows: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, target, run_id, str(rows)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


@pytest.mark.slow
def test_two_writers_at_once_lose_nothing(target):
    """Two processes file 150 rows each, each row its own transaction, at the same time."""
    open_history(target).close()  # created first: the writers race on rows, not on the schema
    writers = [_writer(target, f"w{i}", 150) for i in range(2)]
    outputs = [w.communicate(timeout=240) for w in writers]
    assert [w.returncode for w in writers] == [0, 0], outputs
    history = open_history(target, create=False)
    runs = {r["run_id"]: r for r in list_runs(history)}
    assert {k: (r["rows"], r["status"]) for k, r in runs.items()} == {"w0": (150, "complete"), "w1": (150, "complete")}
    rows = run_rows(history, ["w0", "w1"])
    for run_id in ("w0", "w1"):
        assert sorted(rows[rows["run_id"] == run_id]["size_bytes"]) == [8 * (i + 1) for i in range(150)]


@pytest.mark.slow
def test_a_killed_run_keeps_its_rows_marked_incomplete(target):
    writer = _writer(target, "killed", 100_000)
    assert writer.stdout.readline().strip() == "ready"
    history = open_history(target, create=False)
    deadline = time.monotonic() + 60
    while not list_runs(history) or list_runs(history)[0]["rows"] < 20:
        assert time.monotonic() < deadline, writer.stderr.read()
        time.sleep(0.05)
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=30)
    (run,) = list_runs(history)
    assert run["status"] == "incomplete" and run["ended_at"] is None
    rows = run_rows(history, ["killed"])
    assert len(rows) == run["rows"] >= 20
    assert sorted(rows["size_bytes"]) == [8 * (i + 1) for i in range(len(rows))]  # no gap, no part of a row
    assert rows["time_us_p50"].notna().all()


def test_import_versions_1_and_2_idempotently(target, tmp_path):
    v1 = synth_run(tmp_path / "v1.csv", [Case("all_gather", "flat")], seed=1, version=1, raw=False)
    v2 = synth_run(tmp_path / "v2.csv", [Case("all_gather", "flat")], seed=2, rounds=3, raw=False)
    history = open_history(target)
    first = import_csvs(history, [v1, v2])
    assert [(d.run_id, d.rows, d.added) for d in first] == [("run1", 4, True), ("run2", 4, True)]
    again = import_csvs(history, [v1, v2])
    assert [d.added for d in again] == [False, False]
    runs = {r["run_id"]: r for r in list_runs(history)}
    assert {k: r["rows"] for k, r in runs.items()} == {"run1": 4, "run2": 4}
    rows = run_rows(history, ["run1", "run2"])
    assert set(rows[rows["run_id"] == "run1"]["schema_version"]) == {1}
    assert rows[rows["run_id"] == "run1"]["time_us_p50_lo"].isna().all()  # version 1 had no interval
    assert rows[rows["run_id"] == "run2"]["time_us_p50_rounds"].str.count(";").eq(2).all()
    # Without its .env.json, a CSV's fingerprint comes from what the CSV says, the same for both runs.
    assert runs["run1"]["fingerprint"] == runs["run2"]["fingerprint"]
    assert find_run(history, "run1")["provenance"]["from_csv"] is True


# Version 1 of the history's schema, as a history written by that commbench holds it, written out
# here independently of the migrations in commbench/history/store.py.
V1_SCHEMA = (
    "CREATE TABLE history_meta (key VARCHAR(64) PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE history_runs (run_id VARCHAR(64) PRIMARY KEY, fingerprint VARCHAR(64), kind VARCHAR(32), "
    "command TEXT, backend VARCHAR(32), world_size INTEGER, hosts TEXT, started_at VARCHAR(40) NOT NULL, "
    "ended_at VARCHAR(40), status VARCHAR(16) NOT NULL, source TEXT, commbench_version VARCHAR(32), provenance TEXT)",
    "CREATE TABLE history_rows (run_id VARCHAR(64) NOT NULL REFERENCES history_runs (run_id), seq INTEGER NOT NULL, "
    "op VARCHAR(64), variant VARCHAR(128), phase VARCHAR(64), dtype VARCHAR(16), mode VARCHAR(16), size_bytes BIGINT, "
    "grp VARCHAR(16), world_size INTEGER, status VARCHAR(16), time_us_p50 DOUBLE PRECISION, data TEXT NOT NULL, "
    "PRIMARY KEY (run_id, seq))",
    "INSERT INTO history_meta (key, value) VALUES ('schema_version', '1')",
    "INSERT INTO history_runs (run_id, fingerprint, kind, command, backend, world_size, hosts, started_at, ended_at, "
    "status, source, commbench_version, provenance) VALUES ('old', 'fp0', 'sweep', 'commbench sweep', 'gloo', 4, "
    "'a;b', '2026-01-01T00:00:00+00:00', '2026-01-01T00:01:00+00:00', 'complete', '/x.csv', '0.1.0', '{}')",
)


def _raw_engine(target: str):
    import sqlalchemy

    if "://" in target:
        return sqlalchemy.create_engine(target.replace("postgresql://", "postgresql+psycopg://"))
    return sqlalchemy.create_engine(f"sqlite:///{target}")


def test_a_version_1_history_is_migrated_keeping_its_runs(target):
    from sqlalchemy import text

    engine = _raw_engine(target)
    row = _row(4096, 250.0)
    with engine.begin() as conn:
        for statement in V1_SCHEMA:
            conn.execute(text(statement))
        conn.execute(
            text(
                "INSERT INTO history_rows (run_id, seq, op, variant, phase, dtype, mode, size_bytes, grp, world_size, "
                "status, time_us_p50, data) VALUES ('old', 0, 'all_gather', 'flat', 'comm', 'float32', 'blocking', "
                "4096, 'world', 4, 'ok', 250.0, :data)"
            ),
            {"data": json.dumps({k: str(v) for k, v in row.items()})},
        )
    engine.dispose()
    history = open_history(target)
    with history.read() as conn:
        assert conn.execute(text(f"SELECT value FROM {META}")).scalar() == str(HISTORY_SCHEMA)
        # version 2's columns and table, filled from what version 1 held
        assert conn.execute(text("SELECT time_us_p50_lo, time_us_p50_hi FROM history_rows")).one() == (237.5, 262.5)
    assert [r["run_id"] for r in list_runs(history, host="b")] == ["old"]
    (rows,) = [run_rows(history, ["old"])]
    assert list(rows["time_us_p50"]) == [250.0]
    history.close()
    open_history(target).close()  # a second open finds it current and changes nothing


def test_a_history_from_a_newer_commbench_is_refused(target):
    from sqlalchemy import text

    history = open_history(target)
    with history.begin() as conn:
        conn.execute(text(f"UPDATE {META} SET value = '99' WHERE key = 'schema_version'"))
    history.close()
    with pytest.raises(UserError, match=r"newer commbench \(history schema 99; .* reads up to 2\)"):
        open_history(target)


def test_a_history_in_a_missing_folder_or_not_a_history_is_refused(tmp_path):
    with pytest.raises(UserError, match=r"folder .* does not exist"):
        open_history(str(tmp_path / "nowhere" / "h.sqlite"))
    junk = tmp_path / "junk.sqlite"
    junk.write_text("col\n1\n" * 100)
    with pytest.raises(UserError, match="not a commbench history"):
        open_history(str(junk))
    with pytest.raises(UserError, match="no history at"):
        open_history(str(tmp_path / "absent.sqlite"), create=False)


def test_a_database_that_is_down_is_one_line_with_host_and_port_never_the_password():
    pytest.importorskip("psycopg")
    with pytest.raises(UserError) as caught:
        open_history("postgresql://alice:s3cret@127.0.0.1:9/history")
    message = caught.value.format_message()
    assert "127.0.0.1:9" in message and "s3cret" not in message and "\n" not in message


def test_trend_draws_each_fingerprints_run_to_run_band_and_show_prints_each_series_resolution(tmp_path):
    """Seven runs whose whole series moved by known factors: the band behind their points is the
    95% t prediction interval of one more run from their robust spread, and `history show` of the
    last run states what a comparison against the five before it (compare's --last) resolves."""
    import math
    import statistics

    from click.testing import CliRunner
    from scipy.stats import t

    from commbench.analysis.trend import points, run_to_run_band, trend_chart
    from commbench.cli import main
    from commbench.results.stats import robust_sd

    factors = (1.0, 1.08, 0.95, 1.03, 0.9, 1.12, 1.0)
    target = str(tmp_path / "h.sqlite")
    history = open_history(target)
    for i, factor in enumerate(factors):
        recorder = RunRecorder(history, _run(f"r{i}", started=f"2026-01-0{i + 1}T00:00:00+00:00"))
        for size in (8, 64, 512, 4096):
            recorder.add({**_row(size, (100.0 + size / 10) * factor), "run_id": f"r{i}"})
        recorder.end(completed=True)
    rows = run_rows(history, [f"r{i}" for i in range(len(factors))])
    history.close()
    chart = trend_chart(rows, None)
    found, _ = points(rows, None)
    band = run_to_run_band(sorted(found, key=lambda p: p.started_at), "fp1")
    logs = [math.log(p.value) for p in found]
    half = t.ppf(0.975, len(logs) - 1) * robust_sd(logs) * math.sqrt(1 + 1 / len(logs))
    assert band is not None and band.runs == 7 and (band.first, band.last) == (0, 6)
    assert band.high == pytest.approx(math.exp(statistics.median(logs) + half), rel=1e-9)
    assert band.low == pytest.approx(math.exp(statistics.median(logs) - half), rel=1e-9)
    ax = chart.figure.axes[0]
    assert any("run-to-run band of fp1" in text.get_text() for text in ax.get_legend().get_texts())
    behind = [c for c in ax.collections if c.get_zorder() == 0]
    assert behind and all(c.get_zorder() < p.get_zorder() for c in behind for p in ax.lines)
    assert f"band {band.text} around its median" in chart.caption and band.text.startswith("+")
    shown = CliRunner().invoke(main, ["history", "show", "r6", "--history", target])
    assert shown.exit_code == 0, shown.output
    assert "# resolution per series against the 5 runs of its fingerprint before it (compare --last 5):" in shown.output
    line = next(li for li in shown.output.splitlines() if "run-to-run sd" in li)
    assert line.strip().startswith("all_gather/flat/comm") and "resolves with launches 1 " in line
    first = CliRunner().invoke(main, ["history", "show", "r1", "--history", target])
    assert "# resolution: none yet (" in first.output  # one earlier run: nothing to measure a spread by


def test_history_list_and_trend_chart(tmp_path):
    """Three runs through the CLI's reading side: the listing and a trend PNG."""
    from click.testing import CliRunner

    from commbench.cli import main

    target = str(tmp_path / "h.sqlite")
    history = open_history(target)
    for i, (fp, factor) in enumerate((("fpA", 1.0), ("fpA", 1.05), ("fpB", 1.5))):
        recorder = RunRecorder(history, _run(f"r{i}", fingerprint=fp, started=f"2026-01-0{i + 1}T00:00:00+00:00"))
        for size in (8, 64, 512, 4096):
            recorder.add({**_row(size, 100.0 * factor), "run_id": f"r{i}"})
        recorder.end(completed=True)
    history.close()
    listing = CliRunner().invoke(main, ["history", "list", "--history", target])
    assert listing.exit_code == 0, listing.output
    assert [line.split()[0] for line in listing.output.splitlines()[2:]] == ["r0", "r1", "r2"]
    since = CliRunner().invoke(
        main, ["history", "list", "--history", target, "--since", "2026-01-02", "--fingerprint", "fpA"]
    )
    assert [line.split()[0] for line in since.output.splitlines()[2:]] == ["r1"]
    png = tmp_path / "trend.png"
    chart = CliRunner().invoke(main, ["history", "trend", "--op", "all_gather", "--history", target, "-o", str(png)])
    assert chart.exit_code == 0, chart.output
    assert "3 runs, 2 fingerprints, 1 change marked" in chart.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    unknown = CliRunner().invoke(main, ["history", "show", "zzz", "--history", target])
    assert unknown.exit_code == 2 and "no run 'zzz'" in unknown.output


def test_history_trend_marks_an_incomplete_run_and_the_sizes_its_point_rests_on(tmp_path):
    from commbench.analysis.trend import points, trend_chart

    target = str(tmp_path / "h.sqlite")
    history = open_history(target)
    for i, (sizes, completed) in enumerate((((8, 64, 512, 4096), True), ((8,), False), ((8, 64, 512, 4096), True))):
        recorder = RunRecorder(history, _run(f"r{i}", started=f"2026-01-0{i + 1}T00:00:00+00:00"))
        for size in sizes:
            recorder.add({**_row(size), "run_id": f"r{i}"})
        recorder.end(completed=completed)
    rows = run_rows(history, ["r0", "r1", "r2"])
    found, _ = points(rows, None)
    assert [(p.run_id, p.complete, p.sizes) for p in found] == [("r0", True, 4), ("r1", False, 1), ("r2", True, 4)]
    chart = trend_chart(rows, None)
    assert "1 incomplete (hollow, red label)" in chart.caption
    ticks = [t.get_text() for t in chart.figure.axes[0].get_xticklabels()]
    assert ticks[1].endswith("incomplete 1/4 sizes") and "incomplete" not in ticks[0] + ticks[2]
    history.close()


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("# starting")]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.mark.slow
def test_a_sweep_files_itself_in_its_history_and_bad_histories_are_one_line(tmp_path):
    from tests.support.distributed import commbench

    sweep = ["sweep", "--op", "all_gather", "--variant", "flat", "--sizes", "8,1K", "-n", "3", "--no-plot"]
    done = commbench(*sweep, "-o", str(tmp_path / "a.csv"))
    assert done.returncode == 0, done.stderr
    history = open_history(str(tmp_path / "history.sqlite"), create=False)
    (run,) = list_runs(history)
    csv = pd.read_csv(tmp_path / "a.csv", dtype=str)  # a hex run id such as 41819e433756 is no float
    assert (run["run_id"], run["status"], run["rows"], run["fingerprint"]) == (
        csv.run_id[0],
        "complete",
        len(csv),
        csv.fingerprint[0],
    )
    assert find_run(history, run["run_id"])["provenance"]["hosts"][0]["variables"]["GLOO_SOCKET_IFNAME"] == "lo"
    history.close()
    off = commbench(*sweep, "-o", str(tmp_path / "off" / "b.csv"), "--no-history")
    assert off.returncode == 0 and not (tmp_path / "off" / "history.sqlite").exists()
    history = open_history(str(tmp_path / "history.sqlite"), create=False)
    assert len(list_runs(history)) == 1  # --no-history filed nothing in the history it names
    history.close()
    missing = _one_line(
        commbench(*sweep, "-o", str(tmp_path / "c.csv"), "--history", str(tmp_path / "no" / "h.sqlite"))
    )
    assert "folder" in missing and "does not exist" in missing
    down = _one_line(
        commbench(*sweep, "-o", str(tmp_path / "d.csv"), "--history", "postgresql://bob:pw1234@127.0.0.1:9/h")
    )
    assert "127.0.0.1:9" in down and "pw1234" not in down


def test_without_sqlalchemy_the_default_history_is_skipped_and_an_asked_one_refused(tmp_path, monkeypatch, capsys):
    """A GPU machine running commbench from the tree may lack sqlalchemy: the run goes on without
    its default history (one warning); a history the user asked for is refused in one line."""
    import builtins

    from commbench.console.lines import show_warning
    from commbench.errors import UserError, warnings_shown_by
    from commbench.history.store import open_run_history

    real_import = builtins.__import__

    def no_sqlalchemy(name, *args, **kwargs):
        if name == "sqlalchemy" or name.startswith("sqlalchemy."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_sqlalchemy)
    monkeypatch.delenv(HISTORY_ENV)
    monkeypatch.chdir(tmp_path)
    with warnings_shown_by(show_warning):  # as the CLI shows them
        assert open_run_history(None) is None
    assert "sqlalchemy is not installed" in capsys.readouterr().err
    with pytest.raises(UserError, match="needs sqlalchemy"):
        open_run_history(str(tmp_path / "h.sqlite"))
