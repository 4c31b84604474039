"""Results as Prometheus metrics (commbench/results/metrics.py) and where they go
(commbench/results/metrics_output.py), without servers: the text itself, checked by promtool where
it is installed; the Pushgateway's URL and secret; the refusals. tests/results/test_metrics_prometheus.py
runs them against a real Prometheus."""

from __future__ import annotations

import base64
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from commbench.cli import main
from commbench.errors import UserError
from commbench.results.metrics import METRICS, exposition, message_size
from commbench.results.metrics_output import push, push_target, textfile_path
from commbench.results.ownership import written_by_commbench
from tests.support.errors import assert_one_line_error
from tests.support.prometheus_stack import promtool_check

# What promtool says of Inspector's names, as of Inspector's own files: no HELP (a textfile beside
# Inspector's must agree with it), and its unit; kept, so that the series line up with Inspector's.
INSPECTORS_LINTS = [
    "nccl_algorithm_bandwidth_gbs no help text",
    "nccl_bus_bandwidth_gbs no help text",
    "nccl_collective_exec_time_microseconds no help text",
    'nccl_collective_exec_time_microseconds use base unit "seconds" instead of "microseconds"',
]


def _row(size: int, busbw: float, **changes: Any) -> dict[str, Any]:
    row = {
        "run_id": "r1",
        "timestamp": "2026-12-01T02:00:00+00:00",
        "op": "all_reduce",
        "variant": "flat",
        "phase": "comm",
        "dtype": "float32",
        "mode": "blocking",
        "size_bytes": size,
        "world_size": 16,
        "group": "world",
        "group_size": 16,
        "backend": "nccl",
        "time_us_mean": 100.0,
        "algbw_gbps": busbw / 1.875,
        "busbw_gbps": busbw,
        "wrong": 0,
        "status": "ok",
        "node_ranks": "0-7@gpu01/0;8-15@gpu02/0",
        "fingerprint": "fp1",
        "commbench_version": "0.1.0",
    }
    return {**row, **changes}


def _samples(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(name + "{")]


def test_sizes_print_as_inspector_prints_them() -> None:
    assert [message_size(s) for s in (8, 1023, 1024, 1536, 4 << 20, 1 << 30, 3 << 40, 5 << 50)] == [
        "8B",
        "1023B",
        "1.00KB",
        "1.50KB",
        "4.00MB",
        "1.00GB",
        "3.00TB",
        "5120.00TB",
    ]


def test_a_row_is_one_series_per_metric_with_inspectors_labels_and_no_per_run_label() -> None:
    text = exposition([_row(1 << 20, 42.5)], environ={"SLURM_JOB_ID": "777"})
    (busbw,) = _samples(text, "nccl_bus_bandwidth_gbs")
    assert busbw == (
        'nccl_bus_bandwidth_gbs{collective="AllReduce",message_size="1.00MB",size_bytes="1048576",nranks="16",'
        'hostname="gpu01",rank="0",n_nodes="2",slurm_job_id="777",variant="flat",phase="comm",dtype="float32",'
        'mode="blocking",group="world",backend="nccl"} 42.5'
    )
    for metric in METRICS:
        (line,) = _samples(text, metric.name)
        assert "run_id" not in line and "timestamp" not in line  # a new series every run would break offset 7d
    (info,) = _samples(text, "commbench_run_info")
    assert 'run_id="r1"' in info and 'fingerprint="fp1"' in info and info.endswith(" 1.0")
    (ended,) = _samples(text, "commbench_run_timestamp_seconds")
    assert ended.endswith(" 1796090400.0")  # the row's timestamp, 2026-12-01T02:00:00Z


def test_the_last_row_of_a_series_stands_and_rows_without_figures_give_none() -> None:
    rows = [
        _row(1024, 10.0, run_id="launch1"),
        _row(1024, 12.0, run_id="launch2"),  # sweep --repeat: the same case again
        {**_row(2048, 0.0), "busbw_gbps": float("nan"), "algbw_gbps": None, "time_us_mean": None, "wrong": -1},
        {"op": "all_gather", "variant": "flat", "dtype": "float32", "status": "unavailable", "size_bytes": None},
        _row(float("inf"), 1.0),  # no size a row could have (the readers refuse one)
        _row(-8, 1.0),
    ]
    text = exposition(rows, environ={})
    busbw = _samples(text, "nccl_bus_bandwidth_gbs")
    assert len(busbw) == 1 and busbw[0].endswith(" 12.0") and 'slurm_job_id="unknown"' in busbw[0]
    assert len(_samples(text, "commbench_wrong_elements")) == 2  # the second size's -1: its check never ran
    assert len(_samples(text, "commbench_run_info")) == 3  # launch1, launch2, r1: one per run


def test_an_infinite_figure_is_spelt_as_the_format_spells_it() -> None:
    (line,) = _samples(exposition([_row(8, float("inf"))], environ={}), "nccl_bus_bandwidth_gbs")
    assert line.endswith(" +Inf")


def test_a_label_value_with_quotes_backslashes_and_newlines_is_escaped() -> None:
    text = exposition([_row(8, 1.0, node_ranks='0@h"o\\st\nx/0', variant="a,b")], environ={})
    (line,) = _samples(text, "nccl_bus_bandwidth_gbs")
    assert 'hostname="h\\"o\\\\st\\nx"' in line and 'variant="a,b"' in line


@pytest.mark.slow  # starts promtool
@pytest.mark.skipif(shutil.which("promtool") is None, reason="no promtool (Debian's prometheus package)")
def test_promtool_parses_the_text_and_finds_only_what_it_finds_in_inspectors() -> None:
    rows = [_row(s, s / 1e6, op=op) for op in ("all_reduce", "all_to_all", "barrier") for s in (8, 1 << 20)]
    code, problems = promtool_check(exposition(rows, environ={}))
    assert (code, problems) == (3, INSPECTORS_LINTS)  # 3: lint only; 1 would be a parse error


def test_a_metrics_file_is_commbenchs_own_for_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "c.prom"
    path.write_text(exposition([_row(8, 1.0)], environ={}))
    assert written_by_commbench(path)
    path.write_text("# HELP nccl_bus_bandwidth_gbs from Inspector\n")
    assert not written_by_commbench(path)


def test_the_push_goes_to_the_hosts_group_with_the_password_as_basic_auth() -> None:
    url, headers = push_target("https://ci:pa%40ss@gw.example:9091/", "gpu01")
    assert url == "https://gw.example:9091/metrics/job/commbench/instance/gpu01"
    assert base64.b64decode(headers["Authorization"].split()[1]) == b"ci:pa@ss"
    assert push_target("http://gw:9091/metrics/job/nightly", "gpu01")[0] == "http://gw:9091/metrics/job/nightly"
    assert "Authorization" not in push_target("http://gw:9091", "h")[1]
    with pytest.raises(UserError, match=r"--metrics-push ftp://u:\*\*\*@gw: give the Pushgateway"):
        push_target("ftp://u:secret@gw", "h")


def test_an_unreachable_gateway_is_one_reason_without_the_secret() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once it is closed
    why = push(f"http://ci:hunter2@127.0.0.1:{port}", "x 1\n", "h")
    assert why is not None and why.startswith(f"cannot push the metrics to http://ci:***@127.0.0.1:{port}")
    assert "hunter2" not in why and "\n" not in why


def test_a_textfile_is_a_prom_file_in_a_folder_that_exists(tmp_path: Path) -> None:
    assert textfile_path(str(tmp_path)) == tmp_path / "commbench.prom"
    assert textfile_path(str(tmp_path / "n.prom")) == tmp_path / "n.prom"
    with pytest.raises(UserError, match=r"reads only \*\.prom files; name it n\.prom"):
        textfile_path(str(tmp_path / "n.txt"))
    with pytest.raises(UserError, match=r"the folder .*gone does not exist"):
        textfile_path(str(tmp_path / "gone" / "n.prom"))
    # A launched rank other than 0 writes nothing: its host need not have rank 0's folder.
    assert textfile_path(str(tmp_path / "gone" / "n.prom"), writer=False) == tmp_path / "gone" / "n.prom"
    assert textfile_path(f"{tmp_path}/gone/", writer=False) == tmp_path / "gone" / "commbench.prom"


def test_export_prints_writes_and_refuses_in_one_line(tmp_path: Path) -> None:
    csv = Path(__file__).parents[1] / "data" / "nccl-tests" / "dgx-spark-rs-fec.log"
    printed = CliRunner().invoke(main, ["export", "prometheus", str(csv)])
    assert printed.exit_code == 0, printed.output
    assert _samples(printed.output, "nccl_bus_bandwidth_gbs") and 'collective="AllGather"' in printed.output
    written = CliRunner().invoke(main, ["export", "prometheus", str(csv), "--textfile", str(tmp_path)])
    assert written.exit_code == 0 and (tmp_path / "commbench.prom").read_text() == printed.output
    again = CliRunner().invoke(main, ["export", "prometheus", str(csv), "--textfile", str(tmp_path)])
    assert_one_line_error(again, "already exists", "--overwrite", exit_code=2)
    missing = CliRunner().invoke(main, ["export", "prometheus", str(csv), "--textfile", str(tmp_path / "no/x.prom")])
    assert_one_line_error(missing, "does not exist", exit_code=2)
