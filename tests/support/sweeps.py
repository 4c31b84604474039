"""Run the real runner's sweep and read the CSV it wrote back.

Two places run it: one rank of a fake backend in this process (sweep_one_rank: the runner's
planning, rotation and rows, on a clock the test controls), and every rank of a real group
(sweep_on_rank, for run_ranks). Both go through these two functions alone, so the runner's entry
points are named in one file of the tests.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from commbench.console.display import Display
from commbench.ops.base import Op
from commbench.results.row_outputs import csv_outputs
from commbench.run.config import SweepConfig
from commbench.run.eta import SweepProgress
from commbench.run.groups import Grouping
from commbench.run.plan import SweepPlan, eta_prior
from commbench.run.rotation import sweep_op
from commbench.run.session import Session
from commbench.run.sink import Sink
from commbench.run.watchdog import Watchdog
from tests.support.fakes import FakeBackend


def sweep_one_rank(
    path: Path,
    cfg: SweepConfig,
    backend: FakeBackend,
    ops: Sequence[Op],
    *,
    watch: Callable[[SweepProgress], None] | None = None,
    before: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame, SweepProgress]:
    """The runner's sweep of ops (float32) on this one-rank fake backend, timed by its clock; the rows
    written to path (and path.raw.csv under cfg.raw), read back, and the progress that counted them.

    watch(progress) runs before the sweep, so a test may wrap what the progress reports; before: the
    rows of an earlier run, the ETA's prior.
    """
    grouping = Grouping("world", 1, backend)
    plan = SweepPlan(cfg, grouping, list(ops))
    prior = eta_prior(plan, before) if before is not None else None
    progress = SweepProgress(plan.cases(), cfg.budget, clock=lambda: backend.now, prior=prior)
    if watch is not None:
        watch(progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    display = Display("quiet", stream=io.StringIO())  # the table is not what these tests read
    sink = Sink(path, {"run_id": path.stem, "mode": cfg.mode, "world_size": 1}, display, csv_outputs(path, raw=cfg.raw))
    board = type("Board", (), {"step": lambda self, label: None, "rank": 0})()
    session = Session(cfg, grouping, plan, Watchdog(60, 0), board, progress, sink)
    for op in ops:
        sweep_op(session, op, "float32")
    sink.close()
    return pd.read_csv(path), progress


def sweep_on_rank(backend: Any, cfg: SweepConfig, options: Mapping[str, str] | None = None) -> None:
    """The runner's whole sweep (agreement, groups, measurement, rows to cfg.output) on this rank of a
    real group, as a launched rank runs it; for run_ranks. The caller reads cfg.output back."""
    from commbench.launch.env import detect
    from commbench.ops import build_ops
    from commbench.run.runner import run_sweep

    run_sweep(cfg, detect(), backend, build_ops(cfg.ops, dict(options), ()) if options is not None else None)
