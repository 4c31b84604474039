"""`--repeat K`: K independent launches into one CSV, one history run each, grouped as one candidate."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from commbench.cli import main
from commbench.launch import start as start_module
from commbench.launch.env import LaunchOptions
from commbench.run.config import Outcome, SweepConfig
from tests.launch.test_launchers import TORCHRUN
from tests.support.distributed import commbench
from tests.support.errors import assert_one_line_error


def _fake_launcher(monkeypatch, codes: list[int], folder: Path) -> list[SweepConfig]:
    """One launch as start() runs it, replaced by a fake that records the configuration it was
    given and ends with the next code (the first launch names the CSV, as start() resolves it)."""
    seen: list[SweepConfig] = []

    def fake_start(cfg: SweepConfig, how: LaunchOptions, extra=()) -> Outcome:
        seen.append(cfg)
        return Outcome(codes[len(seen) - 1], Path(cfg.output) if cfg.append else folder / "resolved.csv")

    monkeypatch.setattr(start_module, "start", fake_start)
    return seen


def _cfg() -> SweepConfig:
    return SweepConfig(backend="gloo", ops=("all_gather",), sizes=(8,), output=None)


def test_k_launches_share_a_group_and_append_to_the_first_ones_csv(monkeypatch, tmp_path: Path) -> None:
    seen = _fake_launcher(monkeypatch, [0, 1, 0], tmp_path)
    outcome = start_module.start_launches(_cfg(), LaunchOptions(2, None, None, False), 3)
    assert [c.launch for c in seen] == [1, 2, 3]
    assert len({c.launch_group for c in seen}) == 1 and len(seen[0].launch_group) == 12
    assert [c.append for c in seen] == [False, True, True]
    assert [c.output for c in seen] == [None, str(tmp_path / "resolved.csv"), str(tmp_path / "resolved.csv")]
    assert outcome.code == 1 and outcome.output == tmp_path / "resolved.csv"  # wrong results in one launch


def test_a_launch_that_fails_ends_the_series_with_its_code(monkeypatch, tmp_path: Path) -> None:
    seen = _fake_launcher(monkeypatch, [0, 3, 0], tmp_path)
    assert start_module.start_launches(_cfg(), LaunchOptions(2, None, None, False), 3).code == 3
    assert len(seen) == 2


def test_one_launch_is_a_plain_run(monkeypatch, tmp_path: Path) -> None:
    seen = _fake_launcher(monkeypatch, [0], tmp_path)
    start_module.start_launches(_cfg(), LaunchOptions(2, None, None, False), 1)
    assert dataclasses.replace(seen[0]) == _cfg()  # no launch number, no group: the columns stay empty


def test_under_torchrun_repeat_is_refused_in_one_line(monkeypatch) -> None:
    for key, value in TORCHRUN.items():
        monkeypatch.setenv(key, value)
    result = CliRunner().invoke(main, ["sweep", "--op", "all_gather", "--repeat", "3", "--no-history"])
    assert_one_line_error(result, "under torchrun run the job 3 times instead", exit_code=2)


def test_repeat_takes_1_to_100() -> None:
    result = CliRunner().invoke(main, ["sweep", "--op", "all_gather", "--repeat", "0"])
    assert result.exit_code == 2 and "--repeat" in result.output


@pytest.mark.slow
def test_two_real_gloo_launches_give_one_csv_two_history_runs_and_one_pooled_candidate(tmp_path: Path) -> None:
    history = tmp_path / "h.sqlite"
    common = ["--op", "all_gather", "--variant", "flat", "-b", "8", "-e", "64K", "-f", "8", "-n", "5"]
    common += ["--rounds", "2", "-w", "1", "--nproc", "2", "--history", str(history), "--no-plot"]
    for i in range(3):  # a history to pool against
        assert commbench("sweep", *common, "-o", str(tmp_path / f"h{i}.csv")).returncode == 0
    done = commbench("sweep", *common, "--repeat", "2", "-o", str(tmp_path / "cand.csv"))
    assert done.returncode == 0, done.stderr
    frame = pd.read_csv(tmp_path / "cand.csv")
    assert sorted(frame["launch"].unique()) == [1, 2] and frame["launch_group"].nunique() == 1
    assert frame.groupby("launch")["run_id"].nunique().tolist() == [1, 1] and frame["run_id"].nunique() == 2
    assert sorted(frame["env_file"].unique()) == ["cand.launch1.env.json", "cand.launch2.env.json"]
    assert all((tmp_path / name).is_file() for name in frame["env_file"].unique())
    listing = commbench("history", "list", "--history", str(history))
    assert "5 runs" in listing.stdout.splitlines()[0], listing.stdout
    group = frame["launch_group"].iloc[0]
    rows = listing.stdout.splitlines()[2:]
    assert [f"{group}/1" in r for r in rows] == [False, False, False, True, False], listing.stdout
    assert [f"{group}/2" in r for r in rows] == [False] * 4 + [True] and rows[0].split()[9] == "-"
    judged = commbench("compare", "--history", str(history), str(tmp_path / "cand.csv"))
    assert judged.returncode in (0, 1, 5), judged.stderr
    assert "(2 launches pooled)" in judged.stdout and "the candidate's 2 launches pooled" in judged.stdout


def test_a_group_given_to_the_pairwise_test_is_sent_to_the_history(tmp_path: Path) -> None:
    from tests.support.synth_results import Case, synth_run

    parts = [synth_run(tmp_path / f"l{k}.csv", [Case("all_gather", "flat")], seed=k, run_id=f"l{k}") for k in (1, 2)]
    frames = [pd.read_csv(p).assign(launch=k, launch_group="g") for k, p in enumerate(parts, start=1)]
    pd.concat(frames).to_csv(tmp_path / "group.csv", index=False)
    result = CliRunner().invoke(main, ["compare", str(parts[0]), str(tmp_path / "group.csv")])
    assert_one_line_error(result, "launches of a `--repeat` group: judge it against the history", exit_code=2)
