"""nccl-tests' -J results as a commbench run: read, compared, reported and filed in the history.

The inputs are written by tests/support/nccl_tests_json.py from the layout of nccl-tests'
src/util.cu (JSON_FILE_VERSION 3); no nccl-tests output is copied.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from commbench.cli import main
from commbench.results.reader import ok_rows, read_one
from commbench.results.stats import Stats
from tests.support.nccl_tests_json import SIZES, nccl_tests_file
from tests.support.synth_results import Case, synth_run


def test_an_nccl_tests_file_reads_as_a_run_of_commbench_ops_and_variants(tmp_path: Path) -> None:
    path = nccl_tests_file(tmp_path / "ag.json")
    frame = read_one(path)
    assert set(frame.op) == {"all_gather"} and set(frame.variant) == {"flat", "inplace"}  # out_of / in_place
    assert sorted(frame[frame.variant == "flat"].size_bytes) == list(SIZES)
    assert set(frame.dtype) == {"float32"} and set(frame.backend) == {"nccl"} and set(frame.world_size) == {4}
    assert set(frame.hosts) == {"gpu-a;gpu-b"} and set(frame.node_ranks) == {"0@gpu-a/0;1@gpu-a/0;2@gpu-b/1;3@gpu-b/1"}
    assert set(frame.backend_version) == {"nccl 2.27.3"} and len(ok_rows(frame)) == 2 * len(SIZES)
    # The p50 and its interval are commbench's, over the per-iteration times; busbw is nccl-tests' own.
    document = json.loads(path.read_text())
    first = document["results"][0]
    stats = Stats.from_samples(first["out_of_place_per_iter"]["times_us"])
    row = frame[(frame.variant == "flat") & (frame.size_bytes == first["size"])].iloc[0]
    assert row.time_us_p50 == pytest.approx(stats.time_us_p50) and row.time_us_p50_lo == stats.time_us_p50_lo
    assert row.busbw_gbps == pytest.approx(first["out_of_place"]["bus_bw"]) and row.iters == 20


def test_without_per_iteration_timing_the_mean_is_the_p50_and_the_note_says_so(tmp_path: Path) -> None:
    path = nccl_tests_file(tmp_path / "ar.json", "all_reduce_perf", per_iter=False)
    frame = read_one(path)
    first = json.loads(path.read_text())["results"][0]
    row = frame[(frame.variant == "flat") & (frame.size_bytes == first["size"])].iloc[0]
    assert row.op == "all_reduce" and row.time_us_p50 == pytest.approx(first["out_of_place"]["time"])
    assert "mean time" in row.note and frame.time_us_p50_lo.isna().all()


def test_compare_and_report_take_nccl_tests_files(tmp_path: Path) -> None:
    base = nccl_tests_file(tmp_path / "base.json", seed=1)
    slow = nccl_tests_file(tmp_path / "slow.json", seed=2, factor=1.5)
    same = nccl_tests_file(tmp_path / "same.json", seed=3)
    regressed = CliRunner().invoke(main, ["compare", str(base), str(slow)])
    assert regressed.exit_code == 1, regressed.output
    assert "all_gather" in regressed.output and "regress" in regressed.output.lower()
    assert CliRunner().invoke(main, ["compare", str(base), str(same)]).exit_code == 0
    # One report of both tools' results: the commbench CSV and the nccl-tests file, side by side.
    csv = synth_run(tmp_path / "cb.csv", [Case("all_gather", "flat")], seed=4, raw=False)
    out = tmp_path / "both.html"
    report = CliRunner().invoke(main, ["report", str(csv), str(base), "-o", str(out)])
    assert report.exit_code == 0, report.output
    html = out.read_text()
    assert "base" in html and "cb" in html and "nccl-tests: p50 over its per-iteration times" in html


def test_history_import_files_an_nccl_tests_run_once_with_its_hosts_and_no_secret(tmp_path: Path) -> None:
    path = nccl_tests_file(tmp_path / "nightly.json")
    db = str(tmp_path / "h.sqlite")
    first = CliRunner().invoke(main, ["history", "import", str(path), "--history", db])
    assert first.exit_code == 0 and "# imported 1 run (8 rows)" in first.output, first.output
    again = CliRunner().invoke(main, ["history", "import", str(path), "--history", db])
    assert "1 run was there already" in again.output
    listing = CliRunner().invoke(main, ["history", "list", "--history", db])
    line = next(ln for ln in listing.output.splitlines() if ln.startswith("nccl") and "nccl-tests" in ln)
    assert "nccl-tests" in line and "gpu-a;gpu-b" in line and "all_gather_perf" in line
    run_id = line.split()[0]
    shown = CliRunner().invoke(main, ["history", "show", run_id, "--history", db])
    assert shown.exit_code == 0 and "all_gather/flat/comm" in shown.output
    from commbench.history.query import find_run
    from commbench.history.store import open_history

    provenance = find_run(open_history(db), run_id)["provenance"]
    hosts = provenance["hosts"]
    assert [h["host"] for h in hosts] == ["gpu-a", "gpu-b"] and hosts[0]["nccl"] == "2.27.3"
    assert hosts[0]["variables"] == {"NCCL_DEBUG": "WARN", "NCCL_IB_HCA": "mlx5_0"}
    assert "hush" not in json.dumps(provenance) and "/home/u" not in json.dumps(provenance)


def test_every_reduction_of_an_op_o_all_run_is_a_variant_of_its_own(tmp_path: Path) -> None:
    path = nccl_tests_file(tmp_path / "ar.json", "all_reduce_perf")
    document = json.loads(path.read_text())
    # nccl-tests -o all: the same sizes again with another reduction, one result each.
    document["results"] += [{**r, "redop": "max"} for r in document["results"]]
    path.write_text(json.dumps(document))
    frame = read_one(path)
    assert sorted(set(frame.variant)) == ["flat", "flat_max", "inplace", "inplace_max"]
    assert not frame.duplicated(["variant", "dtype", "size_bytes"]).any()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not valid JSON"),
        ('{"results": [], "version": 4}', "nccl-tests JSON version 4; this commbench reads 1, 2, 3"),
        ('{"config": {}}', "not nccl-tests' -J output"),
        ('{"version": 3, "args": ["./hypercube_perf"], "results": [{}]}', "'hypercube_perf' has no commbench op"),
        ('{"version": 3, "args": ["./all_gather_perf"], "results": []}', "holds no results"),
    ],
)
def test_a_broken_nccl_tests_file_is_one_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    for command in (["report", str(path)], ["history", "import", str(path), "--history", str(tmp_path / "h.db")]):
        result = CliRunner().invoke(main, command)
        assert result.exit_code == 2 and message in result.output, result.output
        assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
