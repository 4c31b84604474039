"""nccl-tests -J files nccl-tests could not have written (issue 44): each is refused in one line,
or its impossible results are named and left out, by every command that reads it (history
import, report, model, compare); never a traceback, never a value filed wrong."""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from commbench.cli import main
from commbench.results import nccl_tests
from tests.support.errors import assert_one_line_error
from tests.support.nccl_tests_json import SIZES, changed_file, nccl_tests_file

READERS = ("history import", "report", "model", "compare")


def _set(path: str, value: object):
    """A change that sets one field, named by its path (`config.devices.1.rank`)."""

    def change(document: dict) -> None:
        *parents, last = path.split(".")
        node = document
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[int(last) if isinstance(node, list) else last] = value

    return change


def _mean_only(value: object):
    """results[1]'s out_of_place time set to value, without its per-iteration times."""

    def change(document: dict) -> None:
        document["results"][1].pop("out_of_place_per_iter")
        document["results"][1]["out_of_place"]["time"] = value

    return change


def _invoke(command: str, path: Path, tmp_path: Path):
    args = {
        "history import": ["history", "import", str(path), "--history", str(tmp_path / "h.sqlite")],
        "report": ["report", str(path), "-o", str(tmp_path / "r.html"), "--overwrite"],
        "model": ["model", str(path), "--json"],
        "compare": ["compare", str(nccl_tests_file(tmp_path / "base.json")), str(path)],
    }[command]
    return CliRunner().invoke(main, args)


REFUSED = {  # name: (change, what the one line says)
    "args a number": (_set("args", 5), "`args` is 5, not a list"),
    "args a string": (_set("args", "./all_gather_perf -b 8"), "`args` is './all_gather_perf -b 8', not a list"),
    "args holding a number": (_set("args", ["./all_gather_perf", 8]), "`args[1]` is 8, not a string"),
    "config a number": (_set("config", 5), "`config` is 5, not an object"),
    "config a list": (_set("config", [1]), "`config` is a list, not an object"),
    "env a number": (_set("env", 5), "`env` is 5, not a list"),
    "env a string": (_set("env", "NCCL_DEBUG=INFO"), "`env` is 'NCCL_DEBUG=INFO', not a list"),
    "env holding an object": (_set("env", [{}]), "`env[0]` is an object, not a string"),
    "nthreads abc": (
        lambda d: d["config"].update(nthreads="abc", devices=[]),
        "config.nthreads is 'abc', not a rank count",
    ),
    "10^12 ranks": (
        lambda d: d["config"].update(nthreads=10**6, ngpus=10**6, devices=[]),
        "config.nthreads x config.ngpus is 1,000,000,000,000",
    ),
    "a rank as text": (_set("config.devices.1.rank", "1"), "config.devices[1].rank is '1', not a rank number"),
    "a rank twice": (_set("config.devices.1.rank", 0), "config.devices[1].rank is 0, not a rank another device has"),
    "a device a number": (_set("config.devices.0", 5), "`config.devices[0]` is 5, not an object"),
    "a host name with a newline": (
        _set("config.devices.0.hostname", "gpu-a\nnccl00000000  forged"),
        r"config.devices[0].hostname is 'gpu-a\nnccl00000000  forged', not a host name",
    ),
    "a host name of 300 letters": (_set("config.devices.0.hostname", "h" * 300), "not a host name"),
    "warm-up iterations as text": (_set("config.warmup_iters", "x"), "config.warmup_iters is 'x', not a count"),
    "a start time that is none": (_set("start_time", "yesterday"), "start_time is 'yesterday', not a date and time"),
    "a start time as a number": (_set("start_time", 5), "start_time is 5, not a date and time"),
    "an end time with a newline": (_set("end_time", "2026\nforged"), "end_time is '2026\\nforged', not a date"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_file_nccl_tests_could_not_write_is_one_line_for_every_reader(tmp_path, case):
    change, fragment = REFUSED[case]
    path = changed_file(tmp_path / "bad.json", change)
    for command in READERS:
        assert_one_line_error(_invoke(command, path, tmp_path), str(path), fragment, exit_code=2)
    assert not (tmp_path / "h.sqlite").exists() or _stored(tmp_path / "h.sqlite") == []


def test_deep_nesting_a_gzip_bomb_and_a_huge_number_are_one_line(tmp_path):
    text = json.dumps(json.loads(nccl_tests_file(tmp_path / "good.json").read_text()))
    deep = tmp_path / "deep.json"
    deep.write_text(text[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    bomb = tmp_path / "bomb.json"
    bomb.write_bytes(gzip.compress(b" " * 50_000_000))  # 50 MB of spaces in some 50 KB
    digits = tmp_path / "digits.json"
    digits.write_text(text.replace('"size": 8,', '"size": ' + "9" * 5000 + ",", 1))
    cases = {deep: "nests deeper than any nccl-tests -J file", bomb: "is gzip-compressed", digits: "is not valid JSON"}
    for path, fragment in cases.items():
        for command in READERS:
            assert_one_line_error(_invoke(command, path, tmp_path), str(path), fragment, exit_code=2)


def test_a_file_over_the_size_budget_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path = nccl_tests_file(tmp_path / "big.json")
    monkeypatch.setattr(nccl_tests, "MAX_FILE_BYTES", path.stat().st_size - 1)
    result = _invoke("history import", path, tmp_path)
    assert_one_line_error(result, f"is larger than {path.stat().st_size - 1:,} bytes", exit_code=2)


@pytest.mark.parametrize(("per_row", "per_file"), [(19, 10**6), (10**5, 20 * 8 - 1)])
def test_more_per_iteration_times_than_the_budget_is_one_line(tmp_path, monkeypatch, per_row, per_file):
    """The file holds 20 times per size and placement, 160 in all."""
    path = nccl_tests_file(tmp_path / "long.json")
    monkeypatch.setattr(nccl_tests, "MAX_TIMES_PER_ROW", per_row)
    monkeypatch.setattr(nccl_tests, "MAX_TIMES", per_file)
    result = _invoke("history import", path, tmp_path)
    assert_one_line_error(result, "per-iteration times", "run nccl-tests with fewer iterations", exit_code=2)


def _times(index: int, value: object):
    return _set(f"results.1.out_of_place_per_iter.times_us.{index}", value)


LEFT_OUT = {  # name: (change, what names it, rows of the 8 kept)
    "size -8": (_set("results.1.size", -8), "results[1]: size -8 is not a size", 6),
    "size eight": (_set("results.1.size", "eight"), "results[1]: size 'eight' is not a size", 6),
    "size 8.5": (_set("results.1.size", 8.5), "results[1]: size 8.5 is not a size", 6),
    "size 10^30": (_set("results.1.size", 10**30), "results[1]: size 1000000000000000000000000000000 is not", 6),
    "size true": (_set("results.1.size", True), "results[1]: size True is not a size", 6),
    "count -1": (_set("results.1.count", -1), "results[1]: count -1 is not a count", 6),
    "a type with a space": (_set("results.1.type", "a b"), "results[1]: type 'a b' is not a name", 6),
    "a reduction as a number": (_set("results.1.redop", 5), "results[1]: redop 5 is not a name", 6),
    "a root as text": (_set("results.1.root", "abc"), "results[1]: root 'abc' is not a rank", 6),
    "a result that is a number": (_set("results.1", 5), "results[1]: it is 5, not a result object", 6),
    "time -5.0": (_mean_only(-5.0), "results[1] out_of_place: time -5.0 is not a time", 7),
    "time 0": (_mean_only(0), "results[1] out_of_place: time 0 is not a time", 7),
    "time nan": (_mean_only("nan"), "results[1] out_of_place: time 'nan' is not a time", 7),
    "time 1e308": (_mean_only(1e308), "results[1] out_of_place: time 1e+308 is not a time", 7),
    "time as text": (_mean_only("fast"), "results[1] out_of_place: time 'fast' is not a time", 7),
    "nwrong as text": (_set("results.1.out_of_place.nwrong", "x"), "nwrong 'x' is not a count", 7),
    "a bandwidth as text": (_set("results.1.in_place.alg_bw", "fast"), "alg_bw 'fast' is not a finite number", 7),
    "per-iteration block a string": (
        _set("results.1.out_of_place_per_iter", "abc"),
        "out_of_place_per_iter is 'abc', not an object",
        7,
    ),
    "per-iteration block a list": (
        _set("results.1.out_of_place_per_iter", [1, 2]),
        "out_of_place_per_iter is a list, not an object",
        7,
    ),
    "times a string": (
        _set("results.1.out_of_place_per_iter.times_us", "abc"),
        "out_of_place_per_iter.times_us is 'abc', not a list of times",
        7,
    ),
    "a negative time": (_times(3, -2.0), "out_of_place_per_iter.times_us[3] -2.0 is not a time", 7),
    "a NaN time": (_times(3, "nan"), "out_of_place_per_iter.times_us[3] 'nan' is not a time", 7),
    "times of 1e308 (their sum overflows)": (
        _set("results.1.out_of_place_per_iter.times_us", [1e308] * 20),
        "out_of_place_per_iter.times_us[0] 1e+308 is not a time",
        7,
    ),
    "a negative bandwidth": (_set("results.1.out_of_place.bus_bw", -1), "bus_bw -1 is not a finite number", 7),
    "nwrong -1": (_set("results.1.out_of_place.nwrong", -1), "nwrong -1 is not a count", 7),
    "in_place a string": (_set("results.1.in_place", "x"), "results[1] in_place: it is 'x', not an object", 7),
}


def _stored(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT variant, size_bytes, time_us_p50, json_extract(data, '$.size_bytes') FROM history_rows"
        ).fetchall()


@pytest.mark.parametrize("case", list(LEFT_OUT))
def test_an_impossible_result_is_named_and_left_out_and_the_rest_filed(tmp_path, case):
    change, fragment, kept = LEFT_OUT[case]
    path = changed_file(tmp_path / "bad.json", change)
    result = _invoke("history import", path, tmp_path)
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    warning, summary = result.output.splitlines()
    assert warning.startswith(f"commbench: warning: {path} results[1]") and fragment in warning, warning
    assert warning.endswith("left out") and f"# imported 1 run ({kept} rows)" in summary, result.output
    rows = _stored(tmp_path / "h.sqlite")
    assert len(rows) == kept
    # What is filed is what the file says: whole sizes of bytes, positive times, the cell as the column.
    assert all(size in SIZES and cell == str(size) and p50 > 0 for _, size, p50, cell in rows), rows
    assert sum(size == SIZES[1] for _, size, _, _ in rows) == kept - 6  # results[1]'s, less those left out


@pytest.mark.parametrize("command", ["report", "model", "compare"])
def test_report_model_and_compare_name_the_result_and_go_on(tmp_path, command):
    path = changed_file(tmp_path / "bad.json", _mean_only(0))
    result = _invoke(command, path, tmp_path)
    assert result.exit_code in (0, 1) and "Traceback" not in result.output, result.output
    named = [line for line in result.output.splitlines() if f"{path} results[1] out_of_place: time 0" in line]
    assert len(named) == 1, result.output


def test_a_file_of_impossible_results_only_is_refused_after_naming_them(tmp_path):
    def every_size_negative(document: dict) -> None:
        for result in document["results"]:
            result["size"] = -1

    path = changed_file(tmp_path / "bad.json", every_size_negative)
    result = _invoke("history import", path, tmp_path)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    *warnings, error = result.output.splitlines()
    assert len(warnings) == len(SIZES) and all("size -1 is not a size" in w for w in warnings)
    assert error.startswith("commbench: error:") and "holds no usable row (4 cut, malformed or impossible" in error


def test_an_unchecked_run_reads_as_unchecked_and_a_checked_one_counts_its_wrong(tmp_path):
    def marks(document: dict) -> None:
        document["results"][0]["out_of_place"]["nwrong"] = "N/A"  # nccl-tests -c 0
        document["results"][1]["out_of_place"]["nwrong"] = 3

    frame = nccl_tests.read_cells(changed_file(tmp_path / "marks.json", marks))
    flat = frame[frame.variant == "flat"].set_index("size_bytes")
    assert flat.loc[str(SIZES[0]), "note"].endswith("not checked (nccl-tests -c 0)")
    assert flat.loc[str(SIZES[1]), ["wrong", "status"]].tolist() == ["3", "wrong"]


def test_the_env_keeps_transport_variables_and_hides_every_secret_name(tmp_path):
    env = (
        "NCCL_IB_HCA=mlx5_0",
        "NCCL_API_KEY=k3y",
        "NCCL_AUTH_TOKEN=t0k",
        "NCCL_PASSWD=pw",
        "UCX_CREDENTIALS=cr3d",
        "NCCL_DEBUG_FILE=postgresql://u:hunter2@h/d",  # a URL's password inside a harmless name's value
        "HOME=/home/u",
    )
    path = nccl_tests_file(tmp_path / "env.json", env=env)
    found = nccl_tests.environment(path)["hosts"][0]["variables"]
    assert found == {
        "NCCL_API_KEY": "<hidden>",
        "NCCL_AUTH_TOKEN": "<hidden>",
        "NCCL_DEBUG_FILE": "postgresql://u:***@h/d",
        "NCCL_IB_HCA": "mlx5_0",
        "NCCL_PASSWD": "<hidden>",
        "UCX_CREDENTIALS": "<hidden>",
    }
    assert not any(secret in json.dumps(found) for secret in ("k3y", "t0k", 'pw"', "cr3d", "hunter2"))


def test_version_1_which_v2_17_3_to_v2_19_1_write_reads_as_the_later_ones(tmp_path):
    """Version 1 differs from 2 and 3 in what this reader does not use: its footer's misspelt
    `average_bus_bandwidith` / `bandwidith` (nccl-tests' src/util.cu of those releases)."""
    old = nccl_tests.read_cells(nccl_tests_file(tmp_path / "v1.json", version=1))
    new = nccl_tests.read_cells(nccl_tests_file(tmp_path / "v3.json", version=3))
    assert "average_bus_bandwidith" in (tmp_path / "v1.json").read_text()
    columns = [c for c in old.columns if c not in ("run_id", "command")]
    assert len(old) == 8 and old[columns].equals(new[columns])


def test_the_mpi_builds_of_the_programs_are_the_same_programs(tmp_path):
    path = changed_file(tmp_path / "mpi.json", _set("args.0", "/usr/local/bin/all_gather_perf_mpi"))
    frame = nccl_tests.read_cells(path)
    assert set(frame.op) == {"all_gather"} and set(frame.api) == {"nccl-tests all_gather_perf"}
