"""nccl-tests runs in the history: real text logs (tests/data/nccl-tests) and -J files imported,
listed, and judged against (`compare NEW` against the runs before it)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from commbench.cli import main
from commbench.history.query import find_run
from commbench.history.store import open_history
from tests.support.nccl_tests_json import nccl_tests_file
from tests.support.nccl_tests_logs import CONFIG_A, CONFIG_B, NO_FEC, RS_FEC, copied, text


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def test_history_import_files_each_log_once_and_list_shows_them(tmp_path: Path) -> None:
    db = str(tmp_path / "h.sqlite")
    logs = [copied(tmp_path, RS_FEC, "2026-03-01 10:00:00"), copied(tmp_path, NO_FEC, "2026-03-01 11:00:00")]
    first = _invoke("history", "import", *map(str, logs), "--history", db)
    assert first.exit_code == 0 and "# imported 2 runs (12 rows) from 2 files" in first.output, first.output
    # The same run saved again behind mpirun --tag-output prefixes is the same run.
    tagged = tmp_path / "tagged.log"
    tagged.write_text("".join(f"[1,0]<stdout>:{line}" for line in text(RS_FEC).splitlines(keepends=True)))
    again = _invoke("history", "import", str(logs[0]), str(tagged), "--history", db)
    assert "# imported 0 runs" in again.output and "2 runs were there already" in again.output, again.output
    listing = _invoke("history", "list", "--history", db).output
    lines = [line for line in listing.splitlines() if line.startswith("nccl")]
    assert len(lines) == 2 and all("nccl-tests" in line and "./build/all_gather_perf -b 1G" in line for line in lines)
    assert "2026-03-01 10:00:00" in lines[0] and "2026-03-01 11:00:00" in lines[1], listing
    run = find_run(open_history(db), lines[0].split()[0])
    log = run["provenance"]["nccl_tests"]["log"]
    assert log["avg_bus_bandwidth"] == "21.4033" and log["nccl_tests_version"] == "2.18.3"
    assert log["time_from"].startswith("the file's modification time")
    assert [h["gpu_model"] for h in run["provenance"]["hosts"]] == ["NVIDIA GB10", "NVIDIA GB10"]


def test_compare_a_j_file_against_a_history_of_imported_nccl_tests_runs(tmp_path: Path) -> None:
    """Once `KeyError: 'world_size'` in history/importer.py: the candidate's fingerprint is now read
    as `history import` reads the file, not as a CSV."""
    db = str(tmp_path / "h.sqlite")
    runs = [nccl_tests_file(tmp_path / f"n{i}.json", seed=i, start=f"2026-12-0{i + 1} 21:00:00") for i in range(3)]
    assert _invoke("history", "import", *map(str, runs), "--history", db).exit_code == 0
    new = nccl_tests_file(tmp_path / "new.json", seed=9, start="2026-12-05 21:00:00")
    result = _invoke("compare", "--history", db, str(new))
    assert result.exit_code in (0, 5) and "Traceback" not in result.output, result.output
    assert "3 runs of fingerprint" in result.output and "noise test history" in result.output


def test_a_log_is_judged_against_the_logs_before_it(tmp_path: Path) -> None:
    """exp1's three Config A repeats as the history, Config B (measured slower in its notes) the candidate."""
    db = str(tmp_path / "h.sqlite")
    history = [copied(tmp_path, name, f"2026-03-10 10:0{i}:00") for i, name in enumerate(CONFIG_A)]
    assert _invoke("history", "import", *map(str, history), "--history", db).exit_code == 0
    candidate = copied(tmp_path, CONFIG_B, "2026-03-10 10:15:00")
    result = _invoke("compare", "--history", db, str(candidate))
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert "3 runs of fingerprint" in result.output and "2 series regressions; FAILED" in result.output


def test_with_one_earlier_log_the_dgx_spark_pair_is_judged_pairwise_and_regresses(tmp_path: Path) -> None:
    db = str(tmp_path / "h.sqlite")
    before = copied(tmp_path, RS_FEC, "2026-03-01 10:00:00")
    assert _invoke("history", "import", str(before), "--history", db).exit_code == 0
    result = _invoke("compare", "--history", db, str(copied(tmp_path, NO_FEC, "2026-03-01 11:00:00")))
    assert result.exit_code == 1, result.output
    assert "judged pairwise against the latest" in result.output and "6 regressions; FAILED" in result.output
