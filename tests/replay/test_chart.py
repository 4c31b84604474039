"""The replay chart: time per step by collective kind, recorded beside replayed."""

from __future__ import annotations

from pathlib import Path

import pytest

from commbench.errors import UserError
from commbench.replay.chart import per_kind, write_replay_chart

ROWS = [
    {"kind": "unmapped", "op": "x", "recorded_us_per_step": "", "replayed_us_per_step": ""},
    {"kind": "call", "op": "all_gather", "recorded_us_per_step": "200", "replayed_us_per_step": "700"},
    {"kind": "call", "op": "all_gather", "recorded_us_per_step": "100", "replayed_us_per_step": "300"},
    {"kind": "call", "op": "all_reduce", "recorded_us_per_step": "", "replayed_us_per_step": "900"},
    {"kind": "step", "op": "step", "recorded_us_per_step": "300", "replayed_us_per_step": "1500"},
]


def test_calls_of_one_kind_add_up_and_the_step_stands_apart() -> None:
    assert per_kind(ROWS) == {
        "all_gather": (300.0, 1000.0),
        "all_reduce": (None, 900.0),  # the trace recorded no time for it: "not recorded", never 0
        "whole step": (300.0, 1500.0),
    }


def test_the_chart_is_written_beside_the_csv_and_never_over_another(tmp_path: Path) -> None:
    csv = tmp_path / "run.csv"
    path = write_replay_chart(csv, ROWS, "a replay", overwrite=False)
    assert path == tmp_path / "run-replay.png" and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(UserError, match="already exists; pass --overwrite"):
        write_replay_chart(csv, ROWS, "a replay", overwrite=False)
