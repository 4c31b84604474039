"""The SyncBatchNorm comparison from a results CSV: p50 time per (phase, C) for every strategy and
each one's speedup over the sync_bn op's baseline (Horovod's three allgathers). pandas only, no torch."""

from __future__ import annotations

import pandas as pd

from commbench.ops.sync_bn import SyncBN
from commbench.results.reader import ok_rows
from commbench.syncbn import STRATEGY_NAMES

BASELINE = SyncBN.spec.baseline
PHASES = SyncBN.spec.phases
# The runs the table keeps apart; C is the `count` column of sync_bn rows.
GROUP_COLUMNS = ["run", "backend", "world_size", "dtype", "mode"]


def strategy_times(frame: pd.DataFrame) -> pd.DataFrame:
    """p50 time (µs), one row per (run, backend, world, dtype, mode, phase, C), one column per variant.

    Strategies keep STRATEGY_NAMES' order; the native CUDA layers, when measured, come last.
    """
    rows = ok_rows(frame[frame["op"] == "sync_bn"]).copy()
    if rows.empty:
        return pd.DataFrame()
    rows["channels"] = rows["count"].astype(int)
    rows["phase"] = pd.Categorical(
        rows["phase"], categories=[p for p in PHASES if p in set(rows["phase"])], ordered=True
    )
    times = rows.pivot_table(
        index=[*GROUP_COLUMNS, "phase", "channels"],
        columns="variant",
        values="time_us_p50",
        aggfunc="median",
        observed=True,
    )
    order = [v for v in STRATEGY_NAMES if v in times.columns] + sorted(set(times.columns) - set(STRATEGY_NAMES))
    return times[order]


def speedups(times: pd.DataFrame, baseline: str = BASELINE) -> pd.DataFrame:
    """baseline time / each strategy's time at the same (phase, C): above 1 is faster than the baseline."""
    return times.rdiv(times[baseline], axis=0)


def format_table(frame: pd.DataFrame, baseline: str = BASELINE) -> str:
    """The printed comparison, one block per run configuration; empty when nothing was measured."""
    times = strategy_times(frame)
    if times.empty:
        return ""
    if baseline not in times.columns:
        return "# no speedups: the baseline strategy " + baseline + " was not measured\n" + times.round(1).to_string()
    ratios = speedups(times, baseline)
    width = max(15, *(len(v) + 2 for v in times.columns))
    blocks = []
    for key, block in times.groupby(level=list(range(len(GROUP_COLUMNS))), sort=False):
        facts = dict(zip(GROUP_COLUMNS, key))
        lines = [
            f"# sync_bn on {int(facts['world_size'])} {facts['backend']} ranks, {facts['dtype']}, {facts['mode']}: "
            f"p50 time per phase in µs (speedup over {baseline}; above 1x = faster)",
            f"# {'phase':<17}{'C':>6}  " + "".join(f"{v:>{width}}" for v in block.columns),
        ]
        for index, row in block.iterrows():
            phase, channels = index[-2], index[-1]
            cells = []
            for variant, time_us in row.items():
                ratio = ratios.loc[index, variant]
                cells.append(
                    "-"
                    if pd.isna(time_us)
                    else f"{time_us:.0f} ({ratio:.2f}x)"
                    if variant != baseline
                    else f"{time_us:.0f}"
                )
            lines.append(f"  {phase:<17}{channels:>6}  " + "".join(f"{c:>{width}}" for c in cells))
        blocks.append("\n".join(lines))
    return "\n".join(blocks)
