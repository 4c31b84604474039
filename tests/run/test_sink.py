"""Rank 0's Sink hands every row to the run's row outputs (commbench/results/row_outputs.py): each
output sees each row once, is closed however the run ends, and delivers only when it completes;
the metrics output (results/metrics_output.py) says the CSV's numbers, and nothing for a stopped run."""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from commbench.console.display import Display
from commbench.results.measurement import Measurement
from commbench.results.metrics_output import MetricsRows
from commbench.results.row_outputs import RowOutput, csv_outputs
from commbench.run.sink import Sink

BASE = {"run_id": "r", "mode": "blocking", "world_size": 2, "node_ranks": "0-1@h1/0", "backend": "gloo"}


class Seen(RowOutput):
    """An output that records what it was handed."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def add(self, row: Mapping[str, Any], m: Measurement | None) -> None:
        self.events.append((row["op"], row["status"], m is not None))

    def close(self, interrupted: bool) -> None:
        self.events.append(("closed", interrupted))

    def finish(self) -> bool:
        self.events.append("finished")
        return True


def _measurement(size: int, us: float) -> Measurement:
    rounds = [[us * 1.01, us, us * 0.99]]
    return Measurement("all_reduce", "flat", "comm", "float32", size, size // 4, 1.0, rounds, [], 0, 1, "all_reduce", 1)


def _sink(tmp_path: Path, *extra: RowOutput) -> Sink:
    path = tmp_path / "r.csv"
    return Sink(path, dict(BASE), Display("quiet", io.StringIO()), [*csv_outputs(path, raw=True), *extra])


def test_each_output_sees_each_row_then_close_then_finish(tmp_path: Path) -> None:
    seen = Seen()
    sink = _sink(tmp_path, seen)
    sink.measured(_measurement(1024, 50.0))
    sink.unavailable("all_gather", "flat", "float32", "refused")
    sink.close()
    assert sink.finish(0) is True
    assert seen.events == [
        ("all_reduce", "ok", True),
        ("all_gather", "unavailable", False),
        ("closed", False),
        "finished",
    ]
    assert (
        len(pd.read_csv(tmp_path / "r.csv")) == 2 and len(pd.read_csv(tmp_path / "r.raw.csv")) == 0
    )  # no per-rank samples kept


def test_the_metrics_say_the_csvs_numbers_once_the_run_completes(tmp_path: Path) -> None:
    textfile = tmp_path / "m.prom"
    sink = _sink(tmp_path, MetricsRows(textfile, None))
    for size, us in ((1024, 33.3333333), (4096, 77.7777777)):
        sink.measured(_measurement(size, us))
    sink.close()
    assert not textfile.exists()  # nothing before the run completes
    sink.finish(0)
    lines = [ln for ln in textfile.read_text().splitlines() if ln.startswith("nccl_bus_bandwidth_gbs{")]
    values = {ln.split('size_bytes="')[1].split('"')[0]: float(ln.rsplit(" ", 1)[1]) for ln in lines}
    csv = pd.read_csv(tmp_path / "r.csv", dtype=str)
    assert values == {s: float(b) for s, b in zip(csv["size_bytes"], csv["busbw_gbps"])}  # the CSV's cells' numbers


def test_a_stopped_run_delivers_no_metrics(tmp_path: Path) -> None:
    textfile = tmp_path / "m.prom"
    sink = _sink(tmp_path, MetricsRows(textfile, None))
    sink.measured(_measurement(1024, 50.0))
    sink.interrupted = True
    sink.close()
    assert not textfile.exists() and len(pd.read_csv(tmp_path / "r.csv")) == 1
