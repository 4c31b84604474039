"""The replay's chart: time per step by collective kind, as the trace recorded it beside as replayed
here (the calls timed one at a time, times their count per step), and the whole step (the sequence
timed back to back beside the time the trace's calls ran, overlaps merged: not their sum)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from commbench.analysis.charts.render import Chart, write_charts
from commbench.results.stats import TYPICAL_NAME

# Okabe-Ito: colour says which side (trace or here), the one thing it encodes.
RECORDED, REPLAYED = "#E69F00", "#0072B2"


def _number(value: object) -> float | None:
    return None if value in (None, "") else float(value)  # type: ignore[arg-type]


def per_kind(rows: Sequence[Mapping[str, str]]) -> dict[str, tuple[float | None, float | None]]:
    """(recorded, replayed) microseconds per step by op, and the step's, from the replay CSV."""
    kinds: dict[str, list[float | None]] = {}
    for row in rows:
        if row["kind"] not in ("call", "step"):
            continue
        name = "whole step" if row["kind"] == "step" else row["op"]
        got = kinds.setdefault(name, [None, None])
        for i, column in enumerate(("recorded_us_per_step", "replayed_us_per_step")):
            value = _number(row.get(column))
            if value is not None:
                got[i] = (got[i] or 0.0) + value
    return {k: (v[0], v[1]) for k, v in kinds.items()}


def replay_chart(rows: Sequence[Mapping[str, str]], title: str) -> Chart:
    from matplotlib.figure import Figure

    kinds = per_kind(rows)
    # Largest replayed time first; the whole step last, apart from the kinds it sums.
    names = sorted((k for k in kinds if k != "whole step"), key=lambda k: -(kinds[k][1] or 0.0))
    names += [k for k in kinds if k == "whole step"]
    fig = Figure(figsize=(8, 1.2 + 0.7 * len(names)))
    ax = fig.add_subplot()
    height = 0.38
    for offset, (side, colour, index) in enumerate((("in the trace", RECORDED, 0), ("replayed here", REPLAYED, 1))):
        ys = [i + (offset - 0.5) * height for i in range(len(names))]
        values = [(kinds[n][index] or 0.0) / 1e3 for n in names]
        bars = ax.barh(ys, values, height=height, color=colour, label=side)
        labels = ["not recorded" if kinds[n][index] is None else f"{v:.3g} ms" for n, v in zip(names, values)]
        ax.bar_label(bars, labels=labels, padding=3, fontsize=8)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlabel("communication time per step (ms)")
    ax.set_title(title, fontsize=10)
    ax.margins(x=0.25)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    caption = (
        f"time per step by collective kind: the trace's recorded times beside the replay's {TYPICAL_NAME} x count; "
        f"the whole step: the time the trace's calls ran, overlaps merged, beside the sequence's {TYPICAL_NAME}"
    )
    return Chart("replay", "replay", fig, caption)


def write_replay_chart(csv_path: Path, rows: Sequence[Mapping[str, str]], title: str, overwrite: bool) -> Path:
    """<stem>-replay.png beside the results CSV."""
    from commbench.replay.summary import REPLAY_CHART
    from commbench.results.paths import beside

    target = beside(csv_path, REPLAY_CHART)
    chart = replay_chart(rows, title)
    chart.name = target.stem
    return write_charts([chart], target.parent, "png", overwrite)[0]
