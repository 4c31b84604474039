"""The HTML report: self-contained, with every chart, every table and the provenance."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from commbench.analysis.charts import plot
from commbench.analysis.charts.plot import build_charts
from commbench.analysis.model import fit_frame, model_charts
from commbench.analysis.report import _cell, _table, build_report
from commbench.cli import main
from commbench.results.reader import read_results
from tests.support.errors import assert_one_line_error
from tests.support.synth_results import CHART_CASES as CASES
from tests.support.synth_results import Case, synth_run


@pytest.fixture
def runs(run_csv: Path) -> list[Path]:
    return [run_csv, synth_run(run_csv.with_name("b.csv"), CASES[:2], seed=2, raw=False, host="otherhost")]


@pytest.mark.slow
def test_report_holds_every_chart_and_table(runs: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "out" / "report.html"
    result = CliRunner().invoke(main, ["report", *map(str, runs), "-o", str(out)])
    assert result.exit_code == 0, result.output
    page = out.read_text()
    frame = read_results(runs)
    charts = build_charts(frame) + model_charts(frame, fit_frame(frame)[0])
    images = re.findall(r"<img alt='([^']+)' src='data:image/png;base64,", page)
    assert images == [c.name for c in charts] and page.count("<img") == len(charts) == 5
    assert images[-2:] == ["all_gather-comm-model", "grouped_all_gather-comm-model"]
    # the runs and their largest differences, provenance, the model's fits, one table per (op, phase)
    # measured (all_gather, grouped_all_gather), the unavailable rows
    assert page.count("<table") == 7
    headings = re.findall(r"<h3 id='([^']+)'>([^<]+)</h3>", page)
    assert [text for _, text in headings] == [
        "What differs between the runs",
        "Largest differences",
        "all_gather · comm",  # charts
        "grouped_all_gather · comm",
        "all_gather · comm",  # results
        "grouped_all_gather · comm",
        "Not measured",
    ]
    # The contents list links every heading, and every link lands.
    contents = page[page.index("<nav class='toc'>") : page.index("</nav>")]
    for anchor, _ in headings + re.findall(r"<h2 id='([^']+)'>([^<]+)</h2>", page):
        assert f"href='#{anchor}'" in contents and page.count(f"id='{anchor}'") == 1
    for fact in (
        "commbench sweep --seed 1",
        "commbench sweep --seed 2",
        "testhost",
        "otherhost",
        "2.13.0+cpu",
        "gloo test",
    ):
        assert fact in page
    assert "http" not in page.replace("http-equiv", "")  # nothing fetched from elsewhere


def test_report_in_svg_and_default_name(runs: list[Path]) -> None:
    result = CliRunner().invoke(main, ["report", str(runs[0]), "--format", "svg"])
    assert result.exit_code == 0, result.output
    page = runs[0].with_suffix(".html").read_text()
    assert page.count("data:image/svg+xml;base64,") == 3 + 2  # results and model charts


def test_unwritable_report_destination_is_one_line(runs: list[Path], tmp_path: Path) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    assert_one_line_error(
        CliRunner().invoke(main, ["report", str(runs[0]), "-o", str(blocker / "sub" / "r.html")]),
        "cannot create the output folder",
    )
    assert_one_line_error(CliRunner().invoke(main, ["report", str(runs[0]), "-o", ""]), "--output is empty")


def test_a_folder_as_destination_gets_the_default_name_inside(runs: list[Path], tmp_path: Path) -> None:
    for given, folder in ((tmp_path, tmp_path), (f"{tmp_path}/new/", tmp_path / "new")):
        result = CliRunner().invoke(main, ["report", str(runs[0]), "-o", str(given)])
        assert result.exit_code == 0, result.output
        assert result.output.strip() == str(folder / runs[0].with_suffix(".html").name)
        assert (folder / runs[0].with_suffix(".html").name).read_text().startswith("<!doctype html>")


def test_report_of_a_missing_file_is_one_line(tmp_path: Path) -> None:
    assert_one_line_error(
        CliRunner().invoke(main, ["report", str(tmp_path / "gone.csv"), "-o", str(tmp_path / "r.html")]),
        "does not exist",
    )


def test_a_run_with_only_wrong_rows_still_reports_its_table(tmp_path: Path) -> None:
    path = synth_run(tmp_path / "w.csv", [Case("all_gather", "flat", status="wrong")], seed=1, raw=False)
    out = tmp_path / "w.html"
    assert CliRunner().invoke(main, ["report", str(path), "-o", str(out)]).exit_code == 0
    page = out.read_text()
    assert page.count("<img") == 0 and page.count("<table") == 2 and ">wrong<" in page


def test_numbers_read_as_people_write_them_noisy_rows_are_marked_and_refused_fits_apart(tmp_path: Path) -> None:
    from commbench.analysis.report import build_report, format_bandwidth, format_time_us, significant

    assert [format_time_us(v) for v in (812.3, 1234.5, 2.5e6, 0.412)] == ["812 µs", "1.23 ms", "2.5 s", "0.412 µs"]
    assert [format_bandwidth(v) for v in (2.309e-05, 0.84, 2.3149)] == ["23.1 KB/s", "840 MB/s", "2.31 GB/s"]
    assert significant(45_678.0) == "45,700" and significant(0.0001234) == "0.000123"
    # A barrier (no bandwidth), a noisy row, and an op whose times do not follow a line.
    cases = [
        Case("barrier", "barrier", sizes=(0,), latency_only=True),
        Case("all_gather", "flat", factors_by_size={8: 9.0, 1024: 0.2, 65536: 7.0, 1 << 20: 0.1}),
    ]
    run = synth_run(tmp_path / "a.csv", cases, seed=3, raw=False)
    frame = read_results([run])
    frame.loc[frame["size_bytes"] == 1024, "note"] = "noisy: mean interval 30% wide"
    noisy_csv = tmp_path / "noisy.csv"
    frame.drop(columns=["run", "source"]).to_csv(noisy_csv, index=False)
    page = build_report([noisy_csv])
    text = re.sub(r"data:image/\w+;base64,[A-Za-z0-9+/=]+", "", page)
    assert "NaN" not in text and not re.search(r"\de[-+]\d", text)  # no NaN, no scientific notation
    assert text.count("<tr class='noisy'>") == 1 and "1 of 5 rows are noisy" in text
    assert " µs</td>" in text and re.search(r"[KMG]B/s</td>", text)
    refused = text[text.index("id='refused-fits'") :]
    assert "all_gather" in refused[: refused.index("</table>")] and "the line does not describe the data" in refused
    # The only fit is refused: no table of fits beside it, where its R² would stand next to good ones.
    assert "<table>" not in text[text.index("id='latency-bandwidth-model'") : text.index("id='refused-fits'")]


def test_a_report_of_several_runs_says_what_differs_and_draws_a_panel_per_variant(tmp_path: Path) -> None:
    """Three runs of three variants (9 lines on one chart before): a table of the runs, what
    differs between them, the largest differences with intervals, and per op a panel per variant
    with the runs as its lines."""
    from commbench.analysis.charts.plot import build_charts
    from commbench.analysis.charts.runs import runs_chart
    from commbench.analysis.report import build_report
    from commbench.analysis.runs import largest_differences, run_colours, what_differs

    cases = lambda slow: [  # noqa: E731
        Case("all_gather", "flat"),
        Case("all_gather", "list", factor=1.1),
        Case("all_gather", "inplace", factor=slow),
    ]
    paths = [
        synth_run(tmp_path / "mon.csv", cases(1.0), seed=1, rounds=3, raw=False),
        synth_run(tmp_path / "tue.csv", cases(1.0), seed=2, rounds=3, raw=False),
        synth_run(tmp_path / "wed.csv", cases(1.6), seed=3, rounds=3, raw=False, host="otherhost"),
    ]
    frame = read_results(paths)
    differs = what_differs(frame)
    assert "hosts: testhost in mon, tue; otherhost in wed" in differs
    assert "options of wed against mon: --seed 1 -> 3" in differs
    largest, notes = largest_differences(frame)
    assert notes == [] and set(largest["run"].iloc[:4]) == {"wed"}
    assert all("all_gather/inplace" in case for case in largest["case"].iloc[:4])
    assert (largest["ratio"].iloc[:4] > 1.4).all() and set(largest["verdict"].iloc[:4]) == {"regression"}
    low, high = (float(x.rstrip("x")) for x in largest["interval"].iloc[0].split(" .. "))
    assert low <= largest["ratio"].iloc[0] <= high
    colours = run_colours(frame)
    chart = runs_chart("all_gather-comm", frame, colours, set())
    panels = [ax for ax in chart.figure.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == ["flat", "inplace", "list"]
    # Each panel holds one line per run, each run in its own colour, the same in every panel.
    for ax in panels:
        assert [line.get_color() for line in ax.get_lines() if line.get_marker() == "o"] == list(colours.values())
    page = build_report(paths)
    assert "<h2 id='runs'>Runs</h2>" in page and "is the baseline of the differences below" in page
    assert "3 runs, one panel per variant (flat, inplace, list)" in page
    one = build_report(paths[:1])  # one run: no runs section, the size chart of old
    assert "<h2 id='runs'>" not in one and "latency and busbw against size" in one
    assert [c.kind for c in build_charts(read_results(paths[:1]))] == ["size"]


def test_the_report_advises_as_the_run_did_from_its_recorded_wall_time(tmp_path: Path) -> None:
    """The run's last line scales its advice's cost by its own wall time, which it adds to its
    .env.json; the report reads it there, so both say the same (they once said 32 s and 59 s)."""
    import json

    import pandas as pd

    from commbench.provenance import env_path, record_wall_time
    from commbench.results.budget import Budget
    from commbench.results.noise import summarise_noise

    csv = synth_run(tmp_path / "noisy.csv", [Case("all_gather", "flat")], seed=4, raw=False, sigma=0.6, rounds=3)
    frame = pd.read_csv(csv, dtype=str, keep_default_na=False)
    frame["note"] = "noisy: mean interval 40% wide"  # what the sink writes of such rows
    frame.to_csv(csv, index=False)
    env_path(csv).write_text(json.dumps({"format": 1, "hosts": []}))
    record_wall_time(csv, 37.5)
    rows = read_results([csv]).to_dict("records")
    console = summarise_noise(rows, Budget(), 37.5)
    assert console is not None and console.cost != summarise_noise(rows, Budget()).cost  # the wall time matters
    result = CliRunner().invoke(main, ["report", str(csv), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    html = (tmp_path / "r.html").read_text()
    assert f"What helps: <code>{console.option}</code> ({console.cost}, estimated from the rows)" in html


@pytest.mark.slow  # the charts render in a pool of processes
def test_the_report_rendered_in_the_pool_equals_the_serial_one(
    runs: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    pools: list[int] = []

    class CountedPool(plot.ProcessPoolExecutor):
        def __init__(self, workers: int, **kwargs: object) -> None:
            pools.append(workers)
            super().__init__(workers, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(plot, "ProcessPoolExecutor", CountedPool)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)  # a pool of two, whatever this machine has
    pooled = build_report(runs)
    monkeypatch.setattr(plot, "MAX_CHART_WORKERS", 1)  # one worker: the serial loop
    serial = build_report(runs)
    # the first report drew its panels' charts and its model's in one pool, beside its tables; the second in none
    assert pools == [2]
    stamp = re.compile(r" at \d{4}-\d\d-\d\dT[0-9:+]+ from ")
    assert pooled.count("<img") == 5 and stamp.sub("", pooled) == stamp.sub("", serial)


def test_a_table_formats_each_distinct_value_as_its_row_would_be_formatted() -> None:
    # _table formats a column's distinct values once (pandas finds them): each cell must read as
    # _cell makes it of the row alone, missing values, empty text, nullable integers and notes included.
    nan = float("nan")
    frame = pd.DataFrame(
        {
            "size_bytes": [1024, 1024, 3_000_000, 8],
            "time_us_p50": [812.0, nan, 1234.5, 812.0],
            "busbw_gbps": [2.31, 0.00084, nan, 2.31],
            "iters": pd.array([10, None, 10, 2000], dtype="Int64"),
            "backend": pd.array(["gloo", None, "", "gloo"], dtype="string"),
            "note": ["noisy: mean interval 30% wide", None, "", "x"],
            "ok": [True, False, True, True],
        }
    )
    cells = "".join(
        f"<tr class='noisy'>{''.join(_cell(c, row) for c in frame.columns)}<td class='mark'>noisy</td></tr>"
        if "noisy" in str(row["note"] or "")
        else f"<tr>{''.join(_cell(c, row) for c in frame.columns)}<td class='mark'></td></tr>"
        for row in frame.to_dict("records")
    )
    assert _table(frame, marks=True).endswith(f"<tbody>{cells}</tbody></table>")
    assert "<td>1K</td>" in cells and "<td>812 µs</td>" in cells and "<td class='text'></td>" in cells
