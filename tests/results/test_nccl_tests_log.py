"""nccl-tests' text output as commbench runs, read from the real logs in tests/data/nccl-tests (its
README names each one's source): every version since 2.0, as people saved it (tag-output and srun
prefixes, kubectl preambles and timestamps, NCCL INFO lines, several tests in one file)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from commbench.cli import main
from commbench.results import nccl_tests_log
from commbench.results.reader import LOG, read_cells, read_one, source_kind
from tests.support.errors import assert_one_line_error
from tests.support.nccl_tests_logs import CONFIG_A, DATA, NO_FEC, RS_FEC, copied, text

# file: (op, world size, hosts, sizes, backend_version, a size and its out-of-place busbw, command)
LOGS = {
    RS_FEC: (
        "all_gather",
        2,
        "spark-4440;spark-fb97",
        3,
        "nccl 2.28.9",
        (2147483648, 21.23),
        "./build/all_gather_perf -b 1G -e 4G -f 2 -n 50 -w 10 -g 1",
    ),
    NO_FEC: ("all_gather", 2, "spark-4440;spark-fb97", 3, "nccl 2.28.9", (4294967296, 2.82), None),
    CONFIG_A[0]: ("all_reduce", 2, "lab", 8, "nccl 2.29.7", (134217728, 2.30), "all_reduce_perf_mpi"),
    "all_reduce_perf.aws-efa-eks.kubectl.log": (
        "all_reduce",
        16,
        "nccl-tests-efa-worker-0;nccl-tests-efa-worker-1",
        28,
        "nccl 2.8.3",
        (1073741824, 32.71),
        "all_reduce_perf",
    ),
    "abci-sharp-all_reduce.log": (
        "all_reduce",
        16,
        "a0000;a0001",
        29,
        "nccl",
        (2147483648, 105.46),
        "./build/all_reduce_perf -b 8 -e 2G -f 2 -g 1 -w 50 -n 50",
    ),
}


@pytest.mark.parametrize("name", list(LOGS))
def test_a_real_log_reads_as_one_run_of_its_op_with_both_placements(name: str) -> None:
    op, world, hosts, sizes, version, (size, busbw), command = LOGS[name]
    frame = read_one(DATA / name)
    assert frame.run_id.nunique() == 1 and set(frame.op) == {op} and set(frame.variant) == {"flat", "inplace"}
    assert set(frame.world_size) == {world} and set(frame.hosts) == {hosts} and set(frame.backend_version) == {version}
    assert len(frame) == 2 * sizes and (frame.status == "ok").all() and set(frame.api) == {f"nccl-tests {op}_perf"}
    row = frame[(frame.variant == "flat") & (frame.size_bytes == size)].iloc[0]
    assert row.busbw_gbps == pytest.approx(busbw) and row.time_us_p50 == row.time_us_mean
    assert command is None or set(frame.command) == {command}


def test_the_header_lines_give_the_config_and_the_ranks_and_old_tables_their_largest_error() -> None:
    frame = read_one(DATA / "abci-sharp-all_reduce.log")  # 2.0 era: `error` columns, no #wrong
    assert set(frame.iters) == {50} and set(frame.warmup) == {50} and set(frame.calls) == {1}
    places = ";".join(f"{r}@a000{r // 8}/{r // 8}" for r in range(16))  # the Using devices list, rank by rank
    assert set(frame.node_ranks) == {places}
    first = frame[(frame.variant == "flat") & (frame.size_bytes == 8)].iloc[0]
    assert first.time_us_mean == pytest.approx(22.54) and pd.isna(first.wrong)  # no count: empty
    assert "nccl-tests' largest error 4e-07 (this version counts no wrong elements)" in first.note
    dgx = read_one(DATA / RS_FEC)
    assert set(dgx.iters) == {50} and set(dgx.warmup) == {10} and (dgx.wrong == 0).all()


def test_tag_output_prefixes_and_stderr_lines_and_nccl_info_lines_are_read_past() -> None:
    frame = read_cells(DATA / "all_reduce_perf.aws-efa-eks.kubectl.log")
    assert frame.attrs["skipped"] == 0  # 2 NCCL INFO lines between the header and the first row: no row
    found = nccl_tests_log.environment(DATA / CONFIG_A[0], frame_run(CONFIG_A[0]))
    assert found["hosts"] == [
        {
            "host": "lab",
            "ranks": 2,
            "nccl": "2.29.7",
            "gpu_model": "NVIDIA GeForce RTX 5090",
            "gpu_count": 2,
            "variables": {},
        }
    ]
    assert found["log"]["avg_bus_bandwidth"] == "1.57614" and found["log"]["out_of_bounds"] == ("0", "OK")


def frame_run(name: str) -> str:
    return str(read_cells(DATA / name).run_id.iloc[0])


@pytest.mark.parametrize("as_name", ["nightly.txt", "nightly", "results.csv", "all_gather.out"])
def test_a_log_is_recognised_by_what_it_holds_not_by_its_name(tmp_path: Path, as_name: str) -> None:
    path = copied(tmp_path, RS_FEC, as_name=as_name)
    assert source_kind(path) == LOG and len(read_one(path)) == 6


def test_several_tests_in_one_file_are_a_run_each(tmp_path: Path) -> None:
    path = tmp_path / "three.log"
    path.write_text("".join(text(name) for name in CONFIG_A))  # cat rep1 rep2 rep3 > three.log
    frame = read_one(path)
    assert frame.run_id.nunique() == 3 and len(frame) == 3 * 16
    # Each run's id is its own lines', the same as when it is read from its own file.
    assert set(frame.run_id) == {frame_run(name) for name in CONFIG_A}
    history = str(tmp_path / "h.sqlite")
    imported = CliRunner().invoke(main, ["history", "import", str(path), "--history", history])
    assert imported.exit_code == 0 and "# imported 3 runs (48 rows) from 1 file" in imported.output, imported.output


def _edited(tmp_path: Path, name: str, change) -> Path:
    """tests/data/nccl-tests/NAME with change(lines) applied: a log cut or damaged as files are."""
    lines = text(name).splitlines(keepends=True)
    change(lines)
    path = tmp_path / name
    path.write_text("".join(lines))
    return path


def _row_line(name: str, size: int) -> int:
    """The index of the table row of `size` in the log."""
    return next(i for i, line in enumerate(text(name).splitlines()) if line.split()[:1] == [str(size)])


def test_a_cut_or_malformed_row_is_named_by_its_line_and_skipped(tmp_path: Path) -> None:
    at = _row_line(RS_FEC, 2147483648)

    def damage(lines: list[str]) -> None:
        lines[at] = lines[at][:40] + "\n"  # cut mid-row
        lines[at + 1] = lines[at + 1].rstrip("\n") + "   7\n"  # one field too many

    path = _edited(tmp_path, RS_FEC, damage)
    result = CliRunner().invoke(main, ["report", str(path), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if "warning" in line]
    assert warnings == [
        f"commbench: warning: {path} line {at + 1}: a cut or malformed row (3 fields; the table has 13): skipped",
        f"commbench: warning: {path} line {at + 2}: a cut or malformed row (14 fields; the table has 13): skipped",
    ]
    assert sorted(set(read_one(path).size_bytes)) == [1073741824]


@pytest.mark.parametrize(
    ("cell", "value", "why"),
    [
        (0, "-8", "size -8 is not a size"),
        (5, "nan", "time nan is not a time"),
        (5, "fast", "time 'fast' is not a time"),
        (7, "-1.5", "bus_bw -1.5 is not a finite number"),
        (8, "x", "nwrong 'x' is not a count"),
    ],
)
def test_an_impossible_value_in_a_row_is_named_by_its_line_and_left_out(tmp_path, cell, value, why):
    at = _row_line(RS_FEC, 2147483648)

    def damage(lines: list[str]) -> None:
        words = lines[at].split()
        words[cell] = value
        lines[at] = "  ".join(words) + "\n"

    path = _edited(tmp_path, RS_FEC, damage)
    result = CliRunner().invoke(main, ["history", "import", str(path), "--history", str(tmp_path / "h.sqlite")])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    warning = result.output.splitlines()[0]
    assert warning.startswith(f"commbench: warning: {path} line {at + 1}") and why in warning, warning
    kept = 4 if cell == 0 else 5  # a bad key cell costs the size both rows, a bad measured cell one
    assert f"({kept} rows)" in result.output


def test_a_malformed_device_line_leaves_its_test_out_named(tmp_path: Path) -> None:
    at = next(i for i, line in enumerate(text(RS_FEC).splitlines()) if "Rank  1 Group" in line)

    def damage(lines: list[str]) -> None:
        lines[at] = lines[at].replace("Rank  1", "Rank  0")  # two lines claim rank 0

    path = _edited(tmp_path, RS_FEC, damage)
    result = CliRunner().invoke(main, ["report", str(path), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    warning, error = result.output.splitlines()
    assert f"line {at + 1}: a malformed device line (rank '0' is on two lines)" in warning
    assert error.startswith("commbench: error:") and "holds no usable row" in error


def test_a_log_without_a_result_table_is_one_line(tmp_path: Path) -> None:
    lines = text(RS_FEC).splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if "out-of-place" in line)
    path = tmp_path / "stopped.log"
    path.write_text("".join(lines[:cut]))  # the job died before its first size
    history = ["--history", str(tmp_path / "h.sqlite")]
    for command in (
        ["history", "import", str(path), *history],
        ["compare", str(path), str(DATA / RS_FEC)],
        ["plot", str(path)],
    ):
        result = CliRunner().invoke(main, command)
        assert_one_line_error(result, str(path), "is nccl-tests output but holds no result table", exit_code=2)


def test_a_test_that_names_no_program_asks_for_its_name(tmp_path: Path) -> None:
    path = copied(tmp_path, "all_reduce_perf.aws-efa-eks.kubectl.log", as_name="launcher.log")
    result = CliRunner().invoke(main, ["report", str(path), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert "names no nccl-tests program" in result.output and "(all_reduce_perf.log)" in result.output


def test_srun_labels_and_kubectl_timestamps_and_prefixes_are_read_past(tmp_path: Path) -> None:
    """A real log with the prefixes srun --label and kubectl logs --timestamps --prefix add (made here)."""
    lines = text(RS_FEC).splitlines(keepends=True)
    path = tmp_path / "k8s.log"
    path.write_text(
        "".join(
            f"2026-02-03T04:05:{i % 60:02d}.123456789Z [pod/job-0/worker]  0: {line}" for i, line in enumerate(lines)
        )
    )
    frame = read_one(path)
    assert len(frame) == 6 and set(frame.timestamp) == {"2026-02-03T04:05:20"}  # the time of its first line (21)
    plain = read_one(DATA / RS_FEC)
    assert frame.time_us_mean.tolist() == plain.time_us_mean.tolist()


def test_a_gzip_bomb_and_a_log_over_the_budget_are_one_line(tmp_path: Path, monkeypatch) -> None:
    bomb = tmp_path / "nightly.log"
    bomb.write_bytes(gzip.compress(text(RS_FEC).encode() * 20_000))  # 40 MB of log in some 100 KB
    assert_one_line_error(
        CliRunner().invoke(main, ["report", str(bomb)]), str(bomb), "is gzip-compressed: give it gunzipped", exit_code=2
    )
    big = copied(tmp_path, RS_FEC, as_name="big.log")
    monkeypatch.setattr(nccl_tests_log, "MAX_LOG_BYTES", big.stat().st_size - 1)
    assert_one_line_error(CliRunner().invoke(main, ["report", str(big)]), f"{big} is larger than", exit_code=2)


def test_a_log_and_the_j_file_of_its_run_give_the_same_rows() -> None:
    """dgx-spark-rs-fec.generated.json is that run's -J document, built from the log's numbers
    (tests/data/nccl-tests/README.md): no public log came with its run's -J file."""
    log = read_one(DATA / RS_FEC)
    document = read_one(DATA / "dgx-spark-rs-fec.generated.json")
    own = {"run_id", "timestamp", "source"}  # when each was read from where
    columns = [c for c in log.columns if c not in own]
    assert log[columns].astype(str).equals(document[columns].astype(str))
