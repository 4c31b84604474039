"""The history gate: a run judged against the runs the history holds of its cases."""

from __future__ import annotations

import pandas as pd

from commbench.history.importer import import_csvs
from commbench.history.store import open_history
from tests.support.synth_results import Case, synth_run


def test_compare_against_history_catches_a_planted_slowdown_and_falls_back_when_short(tmp_path):
    from commbench.analysis.history_gate import compare_history

    cases = [Case("all_gather", "flat", sizes=(8, 1024, 65536, 1 << 20, 4 << 20))]
    paths = []
    for seed in range(6):
        path = synth_run(tmp_path / f"r{seed}.csv", cases, seed=seed, rounds=3, round_sigma=0.03, raw=False)
        frame = pd.read_csv(path)
        frame["timestamp"] = f"2026-01-01T00:0{seed}:00+00:00"
        frame.to_csv(path, index=False)
        paths.append(path)
    slow = synth_run(
        tmp_path / "slow.csv",
        [Case("all_gather", "flat", factor=1.5, sizes=cases[0].sizes)],
        seed=9,
        rounds=3,
        round_sigma=0.03,
        raw=False,
    )
    frame = pd.read_csv(slow)
    frame["timestamp"] = "2026-01-01T00:09:00+00:00"
    frame.to_csv(slow, index=False)
    history = open_history(str(tmp_path / "h.sqlite"))
    import_csvs(history, paths[:2])
    short = compare_history(paths[5], history, last=5)
    assert "(3 needed to judge by its spread): judged pairwise against the latest" in short.notes[0]
    import_csvs(history, paths[2:5])
    same = compare_history(paths[5], history, last=5)
    assert not same.failed and {d.method for d in same.deltas} == {"history"}
    planted = compare_history(slow, history, last=5)
    assert planted.failed and [s.verdict for s in planted.shifts] == ["regression"]
    history.close()
