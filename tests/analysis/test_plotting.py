"""Charts: the figures hold the expected series and axes; files land where asked; bad input is one line."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.colors import to_hex

from commbench.analysis.charts import plot
from commbench.analysis.charts.plot import build_charts, plot_results
from commbench.analysis.charts.render import charts_folder, render
from commbench.analysis.charts.style import speedup_family
from commbench.analysis.compare import compare_runs
from commbench.cli import main
from commbench.cli.execute import chart_after
from commbench.results.reader import read_results
from commbench.results.schema import COLUMNS
from commbench.run.config import Outcome, SweepConfig
from tests.support.errors import assert_one_line_error
from tests.support.synth_results import CHART_CASES as CASES
from tests.support.synth_results import SIZES, Case, synth_run


def _labels(ax) -> list[str]:
    return sorted(line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_"))


def test_one_size_chart_per_op_and_phase_and_a_speedup_chart_per_family(run_csv: Path) -> None:
    charts = build_charts(read_results([run_csv]))
    assert [(c.name, c.kind) for c in charts] == [
        ("all_gather-comm", "size"),
        ("grouped_all_gather-comm", "size"),
        ("grouped_all_gather-comm-speedup", "speedup"),
    ]


def test_size_chart_has_a_line_per_variant_on_log2_axes_with_human_labels(run_csv: Path) -> None:
    chart = build_charts(read_results([run_csv]))[0]
    latency, busbw = chart.figure.axes
    for ax in (latency, busbw):
        assert _labels(ax) == ["flat", "list"]
        assert ax.get_xscale() == "log" and ax.xaxis.get_transform().base == 2
        assert [ax.xaxis.get_major_formatter()(s, 0) for s in SIZES] == ["8B", "1K", "64K", "1M"]
        assert sorted(ax.get_lines()[0].get_xdata()) == list(SIZES)
    assert latency.get_yscale() == "log"
    bands = [c for c in latency.collections if isinstance(c, PolyCollection)]
    intervals = [c for c in latency.collections if isinstance(c, LineCollection)]
    assert len(bands) == 2 and len(intervals) == 2  # per line: a min..p95 band, a bar per mean's interval
    flat = read_results([run_csv]).query("variant == 'flat'").sort_values("size_bytes")
    band = bands[0].get_paths()[0].vertices[:, 1]
    assert band.min() == pytest.approx(flat["time_us_min"].min()) and band.max() == pytest.approx(
        flat["time_us_p95"].max()
    )
    # Each interval bar spans the row's time_us_mean_lo..time_us_mean_hi at its size.
    spans = [y for segment in intervals[0].get_segments() for y in segment[:, 1]]
    assert spans == pytest.approx([y for pair in zip(flat["time_us_mean_lo"], flat["time_us_mean_hi"]) for y in pair])
    title = chart.figure.get_suptitle()
    for fact in ("all_gather", "n=2", "gloo", "float32", "testhost"):
        assert fact in title


def test_speedup_is_baseline_time_over_variant_time(run_csv: Path) -> None:
    speedup = build_charts(read_results([run_csv]))[2]
    (ax,) = speedup.figure.axes
    assert _labels(ax) == ["coalesced"]  # the baseline is the dashed line at 1, not a series
    values = ax.get_lines()[0].get_ydata()
    assert all(1.7 < v < 2.3 for v in values), values
    assert speedup_family("grouped_all_gather").baseline in speedup.caption


def _look(line) -> tuple[str, str, str]:
    return (to_hex(line.get_color()), line.get_linestyle(), line.get_marker())


def test_each_run_is_its_own_line_and_no_two_lines_look_alike(tmp_path: Path) -> None:
    a = synth_run(tmp_path / "old" / "run.csv", CASES[:2], seed=1, raw=False)
    b = synth_run(tmp_path / "new" / "run.csv", CASES[:2], seed=2, raw=False, world_size=4)
    chart = build_charts(read_results([a, b]))[0]
    latency, busbw, *multiples = chart.figure.axes
    # The world size alone tells the runs apart: the legend names that, not the files as well.
    assert _labels(latency) == ["flat (n=2)", "flat (n=4)", "list (n=2)", "list (n=4)"]
    for ax in (latency, busbw):
        looks = {line.get_label(): _look(line) for line in ax.get_lines() if not line.get_label().startswith("_")}
        assert len(set(looks.values())) == 4, looks  # distinct colour, line style and marker
        # colour is the variant, line style and marker the run
        assert looks["flat (n=4)"][0] == looks["flat (n=2)"][0] != looks["list (n=2)"][0]
        assert looks["flat (n=4)"][1:] == looks["list (n=4)"][1:] != looks["flat (n=2)"][1:]
    # Four lines: the bands leave the overview for small multiples, one panel per variant with its runs.
    assert len(latency.collections) == 0 and [ax.get_title() for ax in multiples] == ["flat", "list"]
    assert [sum(line.get_linestyle() != "None" for line in ax.get_lines()) for ax in multiples] == [2, 2]
    # each panel: per run, a min..p95 band and an error bar per mean's interval
    assert [sum(isinstance(c, PolyCollection) for c in ax.collections) for ax in multiples] == [2, 2]
    assert [sum(isinstance(c, LineCollection) for c in ax.collections) for ax in multiples] == [2, 2]
    # The legend sits beside the data, not over it.
    render(chart, "png")
    legend = busbw.get_legend()
    assert legend is not None and latency.get_legend() is None
    renderer = chart.figure.canvas.get_renderer()
    assert legend.get_window_extent(renderer).x0 >= busbw.get_window_extent(renderer).x1


def test_a_run_keeps_its_colours_across_the_size_and_speedup_charts(run_csv: Path) -> None:
    size, speedup = build_charts(read_results([run_csv]))[1:3]
    colors = {line.get_label(): to_hex(line.get_color()) for line in size.figure.axes[0].get_lines()}
    (ax,) = speedup.figure.axes
    assert to_hex(ax.get_lines()[0].get_color()) == colors["coalesced"] != colors["separate"]


def test_speedup_axes_have_ticks_below_and_above_1x(run_csv: Path) -> None:
    (ax,) = build_charts(read_results([run_csv]))[2].figure.axes  # every speedup is about 2x
    low, high = ax.get_ylim()
    ticks = [t for t in ax.get_yticks() if low <= t <= high]
    assert any(t < 1 for t in ticks) and 1.0 in ticks and any(t > 1 for t in ticks)
    assert ax.yaxis.get_major_formatter()(0.5, 0) == "0.5x"


def test_wrong_and_unavailable_rows_are_left_out_and_said(tmp_path: Path) -> None:
    path = synth_run(
        tmp_path / "w.csv",
        [
            Case("sync_bn", "horovod", phase="forward", status="unavailable"),
            Case("sync_bn", "torch", phase="forward"),
            Case("sync_bn", "bad", phase="forward", status="wrong"),
        ],
        seed=3,
        raw=False,
    )
    charts = build_charts(read_results([path]))
    assert [c.name for c in charts] == ["sync_bn-forward"]  # no baseline measured: no speedup chart
    latency, _ = charts[0].figure.axes
    assert _labels(latency) == ["torch"]
    assert "4 row(s) with wrong results not plotted" in charts[0].caption
    assert "horovod unavailable on gloo: needs horovod" in charts[0].caption


def test_mixed_dtypes_get_separate_charts(tmp_path: Path) -> None:
    a = synth_run(tmp_path / "f32.csv", CASES[:1], seed=1, raw=False)
    b = synth_run(tmp_path / "bf16.csv", CASES[:1], seed=1, raw=False, dtype="bfloat16")
    assert [c.name for c in build_charts(read_results([a, b]))] == [
        "all_gather-comm-bfloat16",
        "all_gather-comm-float32",
    ]


@pytest.mark.slow  # the charts render in a pool of processes
@pytest.mark.parametrize("fmt, magic", [("png", b"\x89PNG"), ("svg", b"<svg")])
def test_plot_results_writes_one_file_per_chart(run_csv: Path, tmp_path: Path, fmt: str, magic: bytes) -> None:
    written = plot_results([run_csv], tmp_path / "charts", fmt)
    assert [p.name for p in written] == [
        f"all_gather-comm.{fmt}",
        f"grouped_all_gather-comm.{fmt}",
        f"grouped_all_gather-comm-speedup.{fmt}",
    ]
    assert all(magic in p.read_bytes()[:400] for p in written)


@pytest.mark.slow  # the charts render in a pool of processes
def test_the_pool_writes_the_files_the_serial_loop_writes_in_its_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # all_reduce, one variant, has half the rows of the panels beside it: the pool draws it last.
    run_csv = synth_run(tmp_path / "r.csv", [*CASES, Case("all_reduce", "flat")], seed=1, raw=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)  # a pool of two, whatever this machine has
    pooled = plot_results([run_csv], tmp_path / "pool", "png")
    monkeypatch.setattr(plot, "MAX_CHART_WORKERS", 1)  # one worker: the serial loop
    serial = plot_results([run_csv], tmp_path / "serial", "png")
    # The pool draws the panel with the most rows first; the paths still come in the panels' order.
    assert [p.name for p in pooled] == [p.name for p in serial] and len(serial) == 4
    assert [p.read_bytes() for p in pooled] == [p.read_bytes() for p in serial]


def test_cli_plot_defaults_to_a_folder_beside_the_csv(tmp_path: Path) -> None:
    path = synth_run(tmp_path / "one.csv", CASES[:2], seed=1, raw=False)
    result = CliRunner().invoke(main, ["plot", str(path), "--format", "svg"])
    assert result.exit_code == 0, result.output
    assert [p.name for p in charts_folder(path).iterdir()] == ["all_gather-comm.svg"]
    assert result.output.strip() == str(charts_folder(path) / "all_gather-comm.svg")


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "make, fragments",
    [
        (lambda d: d / "nope.csv", ["does not exist"]),
        (lambda d: _write(d / "empty.csv", ""), ["is empty"]),
        (lambda d: _write(d / "header.csv", ",".join(COLUMNS) + "\n"), ["no rows"]),
        (
            lambda d: _write(d / "other.csv", "name,value\na,1\n"),
            ["lacks required column(s)", "time_us_p50", "not a commbench"],
        ),
        (lambda d: _write(d / "v9.csv", "schema_version,op\n9,x\n"), ["schema_version 9", "reads schema_version 1, 2"]),
        (
            lambda d: _write(d / "r.raw.csv", "run_id,op,variant,phase,dtype,mode,size_bytes,iteration,rank,time_us\n"),
            ["--raw", "r.csv"],
        ),
    ],
)
def test_unusable_input_is_one_line(tmp_path: Path, make, fragments: list[str]) -> None:
    path = make(tmp_path)
    assert_one_line_error(
        CliRunner().invoke(main, ["plot", str(path), "-o", str(tmp_path / "out")]), str(path), *fragments
    )


def test_version_1_files_read_with_the_new_columns_empty(tmp_path: Path) -> None:
    old = synth_run(tmp_path / "v1.csv", CASES[:1], seed=1, raw=True, version=1)
    assert "time_us_p50_lo" not in old.read_text().splitlines()[0]
    frame = read_results([old])
    assert (frame["schema_version"] == 1).all() and len(frame) == len(SIZES)
    assert frame["time_us_p50_lo"].isna().all() and frame["rounds"].isna().all()
    assert (frame["time_us_p50_rounds"] == "").all()
    assert [c.name for c in build_charts(frame)] == ["all_gather-comm"]  # charted, without intervals
    new = synth_run(tmp_path / "v2.csv", CASES[:1], seed=2, raw=True)
    assert {d.method for d in compare_runs(old, new).deltas} == {"U"}  # both kept raw samples
    assert {
        d.method
        for d in compare_runs(old, synth_run(tmp_path / "v1b.csv", CASES[:1], seed=3, raw=False, version=1)).deltas
    } == {"spread"}


def test_missing_some_columns_names_them(run_csv: Path, tmp_path: Path) -> None:
    lines = run_csv.read_text().splitlines()
    header = lines[0].split(",")
    drop = {header.index("busbw_gbps"), header.index("status")}
    trimmed = [",".join(c for i, c in enumerate(line.split(",")) if i not in drop) for line in lines]
    path = _write(tmp_path / "trimmed.csv", "\n".join(trimmed) + "\n")
    result = CliRunner().invoke(main, ["plot", str(path)])
    assert_one_line_error(result, "lacks required column(s) busbw_gbps, status")
    assert "not a commbench" not in result.output


def test_unwritable_output_folder_is_one_line(run_csv: Path, tmp_path: Path) -> None:
    blocker = _write(tmp_path / "afile", "x")
    assert_one_line_error(
        CliRunner().invoke(main, ["plot", str(run_csv), "-o", str(blocker / "charts")]),
        "cannot create the output folder",
    )
    assert_one_line_error(CliRunner().invoke(main, ["plot", str(run_csv), "-o", str(blocker)]), "is a file")
    assert_one_line_error(CliRunner().invoke(main, ["plot", str(run_csv), "-o", ""]), "--output is empty")


@pytest.mark.slow
def test_sweep_charts_beside_its_csv_unless_told_not_to(tmp_path: Path) -> None:
    run_csv = synth_run(tmp_path / "one.csv", CASES[:2], seed=1, raw=False)
    chart_after(Outcome(0, run_csv), plot=False)
    assert not charts_folder(run_csv).exists()
    chart_after(Outcome(0, None), plot=True)  # a non-lead rank under torchrun owns no CSV: rank 0 charts
    assert not charts_folder(run_csv).exists()
    chart_after(Outcome(3, run_csv), plot=True)  # a failed run is not charted
    assert not charts_folder(run_csv).exists()
    chart_after(Outcome(1, run_csv), plot=True)  # wrong results: charted (those rows left out)
    assert os.listdir(charts_folder(run_csv)) == ["all_gather-comm.png"]


def test_sweep_has_a_no_plot_flag() -> None:
    result = CliRunner().invoke(main, ["sweep", "--help"])
    assert "--no-plot" in result.output


@pytest.mark.slow
@pytest.mark.parametrize("flag, charted", [((), True), (("--no-plot",), False)])
def test_sweep_charts_its_csv_when_the_ranks_are_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: tuple[str, ...], charted: bool
) -> None:
    # The ranks are stood in for (test_cli runs real ones): what is tested is the wiring after them.
    def ranks_finished(
        cfg: SweepConfig,
        nproc: int | None,
        master_addr: str | None = None,
        master_port: int | None = None,
        oversubscribe: bool = False,
    ) -> Outcome:
        return Outcome(0, synth_run(Path(cfg.output), CASES[:1], seed=1, raw=False))

    monkeypatch.setattr(
        sys.modules["commbench.cli.sweep"], "execute", ranks_finished
    )  # the group shadows the module name
    out = tmp_path / "run.csv"
    result = CliRunner().invoke(main, ["sweep", "--op", "all_gather", "--sizes", "8", "-o", str(out), *flag])
    assert result.exit_code == 0, result.output
    assert charts_folder(out).exists() == charted
    assert (f"# charts: {charts_folder(out)}/ (1 files)" in result.output) == charted


def _bar_labels(ax) -> list[str]:
    return [text.get_text() for text in ax.texts]


def test_a_one_size_workload_is_drawn_as_bars_in_numeric_order_with_their_values(tmp_path: Path) -> None:
    cases = [
        Case("bucketed_all_reduce", v, sizes=(20 << 20,), factor=f)
        for v, f in (("per_tensor", 2.0), ("bucketed_1M", 1.0), ("bucketed_1e7", 3.0), ("bucketed_256K", 4.0))
    ]
    size_chart, speedup_chart = build_charts(read_results([synth_run(tmp_path / "w.csv", cases, seed=4, raw=False)]))
    latency, busbw = size_chart.figure.axes
    rows = read_results([tmp_path / "w.csv"]).set_index("variant")
    order = ["per_tensor", "bucketed_256K", "bucketed_1M", "bucketed_1e7"]  # the baseline, then by size
    for ax, column, spec in ((latency, "time_us_mean", ",.0f"), (busbw, "busbw_gbps", ".3g")):
        assert [t.get_text() for t in ax.get_xticklabels()] == order
        assert len(ax.patches) == 4
        assert _bar_labels(ax) == [format(rows.loc[v, column], spec) for v in order]
    (ax,) = speedup_chart.figure.axes
    assert [t.get_text() for t in ax.get_xticklabels()] == order[1:]
    tops = [bar.get_y() + bar.get_height() for bar in ax.patches]  # bars start at 1x
    assert 0.4 < tops[0] < 0.6 and 1.7 < tops[1] < 2.3 and 0.55 < tops[2] < 0.8, tops
    assert _bar_labels(ax) == [f"{top:.2f}x" for top in tops]
    assert "20M" in size_chart.caption


def test_bucket_caps_sort_by_size_not_as_text(tmp_path: Path) -> None:
    variants = ["per_tensor", "bucketed_100MB", "bucketed_1MB", "bucketed_25MB", "bucketed_5MB", "flat"]
    cases = [Case("bucketed_reduce_scatter", v, sizes=(14 << 20,)) for v in variants]
    (size_chart, _) = build_charts(read_results([synth_run(tmp_path / "c.csv", cases, seed=6, raw=False)]))
    assert [t.get_text() for t in size_chart.figure.axes[0].get_xticklabels()] == [
        "per_tensor",
        "bucketed_1MB",
        "bucketed_5MB",
        "bucketed_25MB",
        "bucketed_100MB",
        "flat",
    ]


def test_two_runs_of_bars_are_grouped_by_variant_and_told_apart_by_hatch(tmp_path: Path) -> None:
    cases = [Case("bucketed_all_reduce", v, sizes=(20 << 20,)) for v in ("per_tensor", "bucketed_1M")]
    a = synth_run(tmp_path / "a.csv", cases, seed=1, raw=False)
    b = synth_run(tmp_path / "b.csv", cases, seed=2, raw=False)
    latency, busbw = build_charts(read_results([a, b]))[0].figure.axes
    bars = {(to_hex(p.get_facecolor()), p.get_hatch()) for p in latency.patches}
    assert len(bars) == 4 and len({color for color, _ in bars}) == 2 and len({h for _, h in bars}) == 2
    assert [t.get_text() for t in busbw.get_legend().get_texts()] == ["a", "b"]


def test_sync_bn_strategies_are_compared_at_equal_channels_not_equal_bytes(tmp_path: Path) -> None:
    # allreduce moves half the bytes of horovod for one layer, and takes half the time.
    cases = [
        Case("sync_bn", "horovod", phase="forward"),
        Case("sync_bn", "allreduce", phase="forward", bytes_scale=0.5, factor=0.5),
    ]
    speedup = build_charts(read_results([synth_run(tmp_path / "s.csv", cases, seed=5, raw=False)]))[-1]
    (ax,) = speedup.figure.axes
    assert speedup.name == "sync_bn-forward-speedup" and _labels(ax) == ["allreduce"]
    assert list(ax.get_lines()[0].get_xdata()) == [s // 4 for s in SIZES]  # the channel counts
    assert all(1.7 < v < 2.3 for v in ax.get_lines()[0].get_ydata())
    assert ax.get_xlabel().startswith("channels C")


def test_a_latency_only_op_gets_a_latency_chart_without_a_bandwidth_panel(tmp_path: Path) -> None:
    cases = [Case("barrier", "barrier", sizes=(0,), latency_only=True), Case("all_gather", "flat")]
    frame = read_results([synth_run(tmp_path / "b.csv", cases, seed=5, raw=False)])
    assert frame[frame.op == "barrier"].busbw_gbps.isna().all()  # the CSV cells are empty
    charts = {c.name: c for c in build_charts(frame)}
    (latency,) = charts["barrier-comm"].figure.axes
    assert len(latency.patches) == 1 and "latency only" in charts["barrier-comm"].caption
    assert len(charts["all_gather-comm"].figure.axes) == 2
    out = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", str(tmp_path / "b.csv"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "<h3 id='results-barrier-comm'>barrier · comm</h3>" in out.read_text()
    # A barrier moves no data: its title names no dtype, while the all_gather beside it does.
    assert "float32" not in charts["barrier-comm"].figure.get_suptitle()
    assert "float32" in charts["all_gather-comm"].figure.get_suptitle()
