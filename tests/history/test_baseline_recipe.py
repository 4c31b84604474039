"""README's baseline recipe, run end to end as a user types it (fewer sizes, to be quick): a
baseline, a new run, then compare the two and compare the new one against the history. Both runs
file themselves in one history, results/history.sqlite in the folder the commands run from, which
every command reads by default: no --history anywhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from commbench.history.store import HISTORY_ENV
from tests.support.distributed import commbench

SWEEP = ["sweep", "--op", "all_gather", "--variant", "flat", "-b", "1K", "-e", "8K", "-n", "3", "-w", "1", "--no-plot"]


@pytest.mark.slow
def test_the_readme_baseline_recipe_works_end_to_end(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(HISTORY_ENV)  # the default location, as a user has it
    run = lambda *args: commbench(*args, cwd=tmp_path)  # noqa: E731
    for out in ("baseline/main.csv", "new.csv"):
        done = run(*SWEEP, "-o", out)
        assert done.returncode == 0, done.stderr
    assert (tmp_path / "results" / "history.sqlite").is_file()
    assert not (tmp_path / "baseline" / "history.sqlite").exists() and not (tmp_path / "history.sqlite").exists()
    pairwise = run("compare", "baseline/main.csv", "new.csv", "--threshold", "5%")
    # 1: this busy machine moved a row; 5: it could not resolve 5% (inconclusive); either way judged
    assert pairwise.returncode in (0, 1, 5), pairwise.stderr
    assert "only in" not in pairwise.stdout and "no row compared" not in pairwise.stdout, pairwise.stdout
    against = run("compare", "new.csv")
    assert against.returncode in (0, 1, 5), against.stderr
    assert "judged pairwise against the latest" in against.stdout, against.stdout  # the baseline, found
    listing = run("history", "list")
    assert listing.returncode == 0 and "2 runs" in listing.stdout.splitlines()[0], listing.stdout
    assert {"baseline/main.csv", "new.csv"} <= {w for line in listing.stdout.splitlines() for w in line.split()}
