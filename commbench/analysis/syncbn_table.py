"""The SyncBatchNorm comparison from a results CSV: mean time per (phase, C) for every strategy, each
one's speedup over the sync_bn op's baseline (Horovod's three allgathers) with its 95% interval, the
verdicts those intervals allow, and one overall line. pandas only, no torch."""

from __future__ import annotations

import pandas as pd

from commbench.analysis.speedup import Speedup, interval_text, overall, paired_speedups, variant_verdicts
from commbench.ops.sync_bn import SyncBN
from commbench.results.reader import ok_rows
from commbench.results.schema import key_without
from commbench.results.stats import HEADLINE
from commbench.syncbn import STRATEGY_NAMES

BASELINE = SyncBN.spec.baseline
PHASES = SyncBN.spec.phases
# The phase the overall line answers for: a training step runs the layer forward and backward.
STEP_PHASE = "forward_backward"
# The runs the table keeps apart; C is the `count` column of sync_bn rows.
GROUP_COLUMNS = ["run", "backend", *key_without("op", "variant", "phase", "size_bytes")]


def _rows(frame: pd.DataFrame) -> pd.DataFrame:
    rows = ok_rows(frame[frame["op"] == "sync_bn"]).copy()
    rows["count"] = rows["count"].astype(int)
    # A frame not read from a CSV may lack a layout column (group): one value, the same on every row.
    for column in GROUP_COLUMNS:
        if column not in rows.columns:
            rows[column] = ""
    return rows


def strategy_times(frame: pd.DataFrame) -> pd.DataFrame:
    """Mean time (µs, the headline), one row per (run, backend, world, dtype, mode, phase, C), one column per variant.

    Strategies keep STRATEGY_NAMES' order; the native CUDA layers, when measured, come last.
    """
    rows = _rows(frame)
    if rows.empty:
        return pd.DataFrame()
    rows["channels"] = rows["count"]
    rows["phase"] = pd.Categorical(
        rows["phase"], categories=[p for p in PHASES if p in set(rows["phase"])], ordered=True
    )
    times = rows.pivot_table(
        index=[*GROUP_COLUMNS, "phase", "channels"],
        columns="variant",
        values=HEADLINE,
        aggfunc="median",
        observed=True,
    )
    order = [v for v in STRATEGY_NAMES if v in times.columns] + sorted(set(times.columns) - set(STRATEGY_NAMES))
    return times[order]


def _channels(value: float) -> str:
    return str(int(value))


def format_table(frame: pd.DataFrame, baseline: str = BASELINE) -> str:
    """The printed comparison, one block per run configuration; empty when nothing was measured."""
    times = strategy_times(frame)
    if times.empty:
        return ""
    if baseline not in times.columns:
        return "# no speedups: the baseline strategy " + baseline + " was not measured\n" + times.round(1).to_string()
    rows = _rows(frame)
    blocks = []
    for key, block in times.groupby(level=list(range(len(GROUP_COLUMNS))), sort=False):
        facts = dict(zip(GROUP_COLUMNS, key))
        mine = rows[(rows[GROUP_COLUMNS] == pd.Series(facts)).all(axis=1)]
        blocks.append(_block(facts, block, mine, baseline))
    return "\n".join(blocks)


def _block(facts: dict, block: pd.DataFrame, rows: pd.DataFrame, baseline: str) -> str:
    """One run configuration: the times, the speedups with intervals, the verdicts, the overall line."""
    variants = [v for v in block.columns if block[v].notna().any()]
    others = [v for v in variants if v != baseline]
    joined = paired_speedups(rows, baseline, "count")
    time_width = max(9, *(len(v) + 2 for v in variants))
    ratio_width = max(22, *(len(v) + 2 for v in others)) if others else 0
    head = f"# {'phase':<17}{'C':>6}  "
    lines = [
        f"# sync_bn on {int(facts['world_size'])} {facts['backend']} ranks, {facts['dtype']}, {facts['mode']}",
        "# mean time per phase (µs)",
        head + "".join(f"{v:>{time_width}}" for v in variants),
    ]
    for (*_, phase, channels), row in block.iterrows():
        cells = ["-" if pd.isna(row[v]) else f"{row[v]:.0f}" for v in variants]
        lines.append(f"  {phase:<17}{channels:>6}  " + "".join(f"{c:>{time_width}}" for c in cells))
    if not others:
        return "\n".join(lines)
    lines += [
        f"# speedup over {baseline} ({baseline}'s mean / the strategy's), with its 95% interval; above 1x = faster",
        head + " ".join(f"{v:>{ratio_width}}" for v in others),
    ]
    by_key = {(r["phase"], int(r["count"]), r["variant"]): r for r in joined.to_dict("records")}
    for (*_, phase, channels), _row in block.iterrows():
        cells = []
        for variant in others:
            r = by_key.get((phase, int(channels), variant))
            cells.append("-" if r is None else interval_text(Speedup.of_joined(r)))
        lines.append(f"  {phase:<17}{channels:>6}  " + " ".join(f"{c:>{ratio_width}}" for c in cells))
    lines.append(
        f"# verdicts against {baseline}: an interval that holds 1x is within noise, no winner "
        "(intervals: docs/syncbn.md#reading-the-speedups)"
    )
    phases = [p for p in PHASES if p in set(joined["phase"])]
    for phase in phases:
        for variant, text in variant_verdicts(joined[joined["phase"] == phase], others, "count", "C", _channels):
            lines.append(f"  {phase:<17}{variant}: {text}")
    step = STEP_PHASE if STEP_PHASE in phases else (phases[-1] if phases else None)
    if step is not None and (line := overall(rows[rows["phase"] == step], baseline, "count", "C", _channels)):
        lines.append(f"# overall ({step}): {line}")
    return "\n".join(lines)
