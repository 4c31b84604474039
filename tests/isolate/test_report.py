"""What a node sweep leaves behind (isolate/report.py): the console verdict, the chart, and each of
them as commbench's own output under the writing rule: the CSV's header known, the verdict file
marked, the chart signed, --json planned with the run's outputs and refused before any rank starts."""

from __future__ import annotations

import json
import re
from itertools import combinations, pairwise

import pytest
from click.testing import CliRunner

from commbench.cli import main
from commbench.isolate.findings import Verdict
from commbench.isolate.report import COLUMNS, draw, draw_beside, format_verdict, verdict_path
from commbench.results.ownership import JSON_MARK, written_by_commbench
from tests.support.errors import assert_one_line_error


def _verdict_json() -> dict:
    hosts = ["n1", "n2", "n3", "n4"]
    pairs = [
        [a, b, 0.25 if "n4" in (a, b) else (0.4 if {a, b} == {"n1", "n2"} else 1.0)] for a, b in combinations(hosts, 2)
    ]
    bar = {"median": 1.0, "mad": 0.0, "margin": 0.2, "cut": 0.8}
    return {
        "hosts": hosts,
        "ranks": {str(i): f"{h}:0" for i, h in enumerate(hosts)},
        "size_bytes": 131072,
        "latency_bytes": 8,
        "threshold": 0.2,
        "k": 3.0,
        "screen": "all-pairs",
        "rounds": {"screen": 3, "confirmation": 4, "local": 0, "bisect": 0},
        "rounds_used": 7,
        "round_seconds": [1.0] * 7,
        "host": {
            "scores": {"n1": 1.0, "n2": 1.0, "n3": 1.0, "n4": 0.25},
            "bar": bar,
            "suspects": ["n4"],
            "confirmations": {
                "n4": {"pairs": [["n1", "n4", 0.25], ["n2", "n4", 0.26]], "references": [["n1", "n2", 0.98]]}
            },
            "link_bar": {"median": 1.0, "mad": 0.0, "margin": 0.2, "cut": 0.8},
            "link_suspects": [["n1", "n2", 0.4]],
            "link_confirmations": {
                "n1-n2": {"pairs": [["n1", "n2", 0.41]], "references": [["n1", "n3", 1.0], ["n2", "n3", 1.0]]}
            },
            "pairs": pairs,
            "flagged": ["n4"],
            "flagged_links": [["n1", "n2"]],
        },
        "local": None,
        "compute": {
            "gflops": {"n1:0": 10.0, "n2:0": 10.0, "n3:0": 2.0, "n4:0": 10.0},
            "flops": 2e9,
            "bar": {"median": 10.0, "mad": 0.0, "margin": 2.0, "cut": 8.0},
            "suspects": [2],
            "reference": 0,
            "window_s": 0.2,
            "samples": 5,
            "seconds": {"probe": 1.0, "retimings": 2.0},
            "beside_gflops": {"2": [[5.0, 20.0], [6.0, 19.0]]},
            "flagged": [2],
        },
        "bisect": None,
        "flagged_hosts": ["n4"],
        "flagged_links": [["n1", "n2"]],
        "flagged_rails": [],
        "flagged_ranks": [2],
        "wrong": 0,
    }


def _verdict() -> Verdict:
    return Verdict.from_json(_verdict_json())


def test_the_verdict_names_each_culprit_with_its_evidence(tmp_path):
    text = format_verdict(_verdict())
    lines = [" ".join(line.split()) for line in text.splitlines()]
    assert "n4 0.25 GB/s -75% SLOW HOST (re-measured n1-n4 0.25, n2-n4 0.26 GB/s against n1-n2 0.98)" in lines
    assert "n3 1 GB/s +0% ok" in lines
    assert "link n1-n2: 0.40 of what both reach elsewhere" in text and "SLOW LINK" in text
    assert "n3:0: 2 GFLOP/s; re-timed beside n1:0: 5 vs 20, 6 vs 19: COMPUTE STRAGGLER" in text
    assert text.splitlines()[-1] == "# isolate: 1 slow host(s): n4; 1 slow link(s): n1-n2; 1 slow rank(s): n3:0"
    png = draw(_verdict(), tmp_path / "m.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # What --json writes reads back as the same verdict, and holds the file's keys as they were.
    written = json.loads(json.dumps(_verdict().to_json()))
    assert Verdict.from_json(written) == _verdict()
    assert written["host"]["confirmations"]["n4"]["pairs"] == [["n1", "n4", 0.25], ["n2", "n4", 0.26]]


def _tiny_verdict() -> Verdict:
    """Scores as a loaded cluster's small exchanges give them: GB/s in the ten-thousandths."""
    v = _verdict_json()
    v["host"]["scores"] = {"n1": 0.000288, "n2": 0.000291, "n3": 0.000279, "n4": 0.000071}
    v["host"]["bar"] = {"median": 0.000284, "mad": 0.0000288, "margin": 0.0000568, "cut": 0.000227}
    v["host"]["pairs"] = [[a, b, bw / 3500] for a, b, bw in v["host"]["pairs"]]
    return Verdict.from_json(v)


def test_the_console_verdict_never_writes_an_exponent():
    text = format_verdict(_tiny_verdict())
    assert "MAD 0.0000288" in text and "median 0.000284" in text and "n4 0.000071 GB/s" in " ".join(text.split())
    assert not re.search(r"\de[-+]\d", text), text


def test_the_score_axis_ticks_do_not_run_together(tmp_path, monkeypatch):
    """Look at the chart: its score axis, a narrow panel, once wrote 8 long tick labels over each other."""
    import matplotlib.figure

    drawn = []
    save = matplotlib.figure.Figure.savefig
    monkeypatch.setattr(
        matplotlib.figure.Figure, "savefig", lambda fig, *a, **k: (drawn.append(fig), save(fig, *a, **k))
    )
    draw(_tiny_verdict(), tmp_path / "tiny.png")
    (fig,) = drawn
    (axis,) = [ax.xaxis for ax in fig.axes if ax.get_xlabel() == "host score (GB/s)"]
    fig.canvas.draw()
    low, high = axis.axes.get_xlim()
    labels = [t for t in axis.get_ticklabels() if t.get_text() and low <= t.get_position()[0] <= high]
    boxes = sorted((t.get_window_extent() for t in labels), key=lambda b: b.x0)
    assert len(boxes) >= 2 and all(a.x1 < b.x0 for a, b in pairwise(boxes)), [t.get_text() for t in labels]
    assert not [t.get_text() for t in labels if "e" in t.get_text()] and not axis.get_offset_text().get_text()


def test_every_file_a_sweep_leaves_is_one_overwrite_may_replace(tmp_path):
    """The CSV's header, the verdict file (--json's document too) and the chart say they are commbench's."""
    csv = tmp_path / "iso.csv"
    csv.write_text(",".join(COLUMNS) + "\n")
    document = _verdict().to_json()
    assert next(iter(document)) == JSON_MARK and document[JSON_MARK].startswith("commbench ")
    verdict_path(csv).write_text(json.dumps(document, indent=1))
    chart = draw_beside(_verdict(), csv)
    assert chart == tmp_path / "iso-isolate.png" and chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert all(written_by_commbench(p) for p in (csv, verdict_path(csv), chart))
    assert Verdict.from_json(json.loads(verdict_path(csv).read_text())) == _verdict()  # the mark is no field


def test_a_chart_replaces_only_commbenchs_own_file_and_only_with_overwrite(tmp_path):
    chart = draw(_verdict(), tmp_path / "m.svg")
    with pytest.raises(Exception, match="already exists"):
        draw(_verdict(), chart)
    assert draw(_verdict(), chart, overwrite=True) == chart
    theirs = tmp_path / "theirs.png"
    theirs.write_bytes(b"a picture of someone else's")
    with pytest.raises(Exception, match="not written by commbench"):
        draw(_verdict(), theirs, overwrite=True)
    assert theirs.read_bytes() == b"a picture of someone else's"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-o", "a.csv", "--json", "a.csv"], "--json a.csv is also where the results CSV goes"),
        (["-o", "a.csv", "--json", "a.verdict.json"], "is also where the run's .verdict.json file beside its CSV goes"),
        (["-o", "a.csv", "--json", "theirs.json", "--overwrite"], "theirs.json was not written by commbench"),
        (["-o", "a.csv", "--json", "theirs.json"], "theirs.json already exists; choose another --json"),
        (["-o", "b.csv"], "b.verdict.json already exists"),
        (["-o", "b.csv", "--overwrite"], "b.verdict.json was not written by commbench"),
        (
            ["-o", "c.csv", "--plot", "--json", "c-isolate.png"],
            "--json c-isolate.png is also where the run's -isolate.png file",
        ),
    ],
)
def test_isolate_outputs_are_refused_before_any_rank_starts(tmp_path, monkeypatch, args, message):
    """The plan sees every output together (results/outputs.py): nothing is written, no rank starts."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "theirs.json").write_text('{"mine": true}')
    (tmp_path / "b.verdict.json").write_text("{}")
    before = sorted(p.name for p in tmp_path.iterdir())
    assert_one_line_error(CliRunner().invoke(main, ["isolate", "--nproc", "2", *args]), message, exit_code=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert (tmp_path / "theirs.json").read_text() == '{"mine": true}'
