"""What one nccl-tests run says of its own noise, where it keeps no samples.

A row of nccl-tests (a -J file without per-iteration timing, or its text table) holds one time,
the mean of its iterations, and no spread: two runs' rows compared on that alone either see no
noise (and call every change real) or see nothing. But each size is measured twice in one run,
out of place and in place: the same collective over the same bytes, timed one after the other. So
the log difference d of the two times of a size is the difference of two samples of one
measurement, and over a run's n sizes the variance of one sample's log time is estimated by
sum(d^2) / (2 n), with n degrees of freedom. A systematic difference between the placements (one
faster at every size) counts as noise here, so the estimate errs wide, never narrow; and it is
within one run: drift between runs is what several runs in the history show (analysis/history_gate.py).
The comparison's test on it is analysis/verdict.py placements_p.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from commbench.results.nccl_tests import API_PREFIX, IN_PLACE_VARIANT, PROGRAMS

# The columns reader.typed adds to every row: the variance of one sample's log time in the row's
# run (NaN where the run is not nccl-tests' or has no size with both placements), and the pairs
# of placements it rests on (its degrees of freedom).
PLACEMENT_VAR = "placement_var"
PLACEMENT_PAIRS = "placement_pairs"
# What a variant is named after the placement: "" (sum), "_max", "_root3" (nccl_tests._qualifier).
_PLACEMENT = "^(" + "|".join(sorted({IN_PLACE_VARIANT, *(v for _, v in PROGRAMS.values())})) + ")"
_PAIR = ["run_id", "op", "phase", "dtype", "mode", "size_bytes", "world_size", "group", "qualifier"]


def placement_spread(frame: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """(variance of one sample's log time, pairs) of each row's run, from its sizes measured in both
    placements; NaN and 0 for rows that are not nccl-tests' (their runs keep their own samples)."""
    variance = pd.Series(np.nan, index=frame.index)
    pairs = pd.Series(0.0, index=frame.index)
    if not any(str(api).startswith(API_PREFIX) for api in pd.unique(frame["api"])):
        return variance, pairs
    mine = frame["api"].str.startswith(API_PREFIX) & (frame["status"] == "ok") & (frame["time_us_mean"] > 0)
    rows = frame[mine]
    if rows.empty:
        return variance, pairs
    table = rows[_PAIR[:-1]].assign(
        qualifier=rows["variant"].str.replace(_PLACEMENT, "", regex=True),
        side=np.where(rows["variant"].str.startswith(IN_PLACE_VARIANT), "in", "out"),
        log_time=np.log(rows["time_us_mean"].astype(float)),
    )
    sides = table.pivot_table(index=_PAIR, columns="side", values="log_time", aggfunc="first")
    if not {"in", "out"} <= set(sides.columns):
        return variance, pairs
    gap = (sides["out"] - sides["in"]).dropna()
    if gap.empty:
        return variance, pairs
    by_run = gap.groupby(level="run_id")
    counted = by_run.size()
    spread = (gap**2).groupby(level="run_id").sum() / (2 * counted)
    variance[mine] = rows["run_id"].map(spread)
    pairs[mine] = rows["run_id"].map(counted).fillna(0).astype(float)
    return variance, pairs
