"""The results CSV's schema: its columns, its row key and the vocabulary of its cells.

The writer is commbench/results/writer.py, the output paths commbench/results/paths.py, the
readers commbench/results/reader.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from commbench.results.ownership import register_header
from commbench.results.stats import HEADLINE, HEADLINE_HI, HEADLINE_LO, STAT_COLUMNS

SCHEMA_VERSION = 2
# Versions the readers accept: version 1 lacks the interval and round columns, read as empty.
READABLE_VERSIONS = (1, 2)


def rank_hosts(node_ranks: str) -> list[str]:
    """The host of each rank listed in a node_ranks value (`0-7@gpu1/0;8@gpu2/1`: a range of
    consecutive ranks on one node, or one rank), in the order listed."""
    hosts: list[str] = []
    for entry in str(node_ranks or "").split(";"):
        ranks, at, place = entry.partition("@")
        if not at:
            continue
        first, _, last = ranks.partition("-")
        count = int(last) - int(first) + 1 if last else 1
        hosts += [place.split("/", 1)[0]] * count
    return hosts


# The tidy schema: a run writes one row per CASE_KEY (below). docs/csv-schema.md explains each column.
COLUMNS = (
    *"schema_version run_id timestamp".split(),
    *"op variant phase dtype mode size_bytes count world_size group group_size backend api calls".split(),
    *"iters warmup window rounds timer".split(),
    *STAT_COLUMNS,
    "time_us_p50_rounds",
    "time_us_mean_rounds",
    *"algbw_gbps busbw_gbps wrong status note".split(),
    *"comm_us compute_us overlapped_us overlap compute_flops".split(),  # --overlap only
    *"hosts node_ranks torch_version backend_version commbench_version command".split(),
    *"fingerprint env_file".split(),  # the run's fingerprint and its hosts' <stem>.env.json (docs/history.md)
    *"launch launch_group".split(),  # sweep --repeat K: which of the K launches, and the id they share
)

# A row's status: ok, wrong (its check found wrong elements), unavailable (the variant could not
# run), or stopped (the sweep stopped before the case's last round: measured, never checked).
STOPPED = "stopped"

# The row key, defined here once; every other key is derived from it (tests/results/test_row_key.py).
# CASE_KEY: what a row of one run measures; a run writes one row per value of it.
CASE_KEY = ("op", "variant", "phase", "dtype", "mode", "size_bytes")
# LAYOUT_KEY: how the run's ranks were laid out, the same on every row of a run; rows of two runs
# are measurements of one thing only when it matches too (n=2 never meets n=8, an intra-host group
# never a world one).
LAYOUT_KEY = ("world_size", "group")
ROW_KEY = (*CASE_KEY, *LAYOUT_KEY)
# One line over sizes (compare's series, the history's trends).
SERIES_KEY = tuple(c for c in ROW_KEY if c != "size_bytes")
RAW_COLUMNS = register_header(("run_id", *CASE_KEY, "round", "iteration", "rank", "time_us"))
RAW_COLUMNS_V1 = register_header(tuple(c for c in RAW_COLUMNS if c != "round"))


def key_without(*columns: str) -> tuple[str, ...]:
    """ROW_KEY without the named columns, in its order: the key of rows that differ only in those
    (a speedup pairs the variants of one size; the SyncBN table a run's ops, phases and sizes)."""
    unknown = set(columns) - set(ROW_KEY)
    if unknown:
        raise ValueError(f"not row-key columns: {', '.join(sorted(unknown))}")
    return tuple(c for c in ROW_KEY if c not in columns)


def key_words(columns: tuple[str, ...]) -> str:
    """Key columns as a message names them: (op, variant, ..., size, world size, group)."""
    return "(" + ", ".join(c.removesuffix("_bytes").replace("_", " ") for c in columns) + ")"


# -- what a measurement's cell can be ---------------------------------------------------------------


@dataclass(frozen=True)
class CellRule:
    """What a measured value must be to be a measurement: a finite number from `smallest` (above
    it, unless `inclusive`) up to `largest`, a whole number where `whole`. The readers check every
    results file's cells (commbench/results/reader.py) and nccl-tests' fields and per-iteration times
    (commbench/results/nccl_tests.py) against these; a value that breaks one is named and its row
    left out, never filed, charted or judged. `meaning` names the rule in that message."""

    whole: bool
    smallest: float
    inclusive: bool
    largest: float
    meaning: str

    def holds(self, value: object) -> bool:
        """Whether one value (a cell's text, or a JSON number) keeps the rule."""
        if isinstance(value, bool):
            return False
        try:
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError, OverflowError):
            return False
        if not math.isfinite(number) or (self.whole and number % 1):
            return False
        above = number >= self.smallest if self.inclusive else number > self.smallest
        return above and number <= self.largest


# The readers hold numbers as float64, exact for whole numbers up to 2^53 (8 PiB: no buffer comes
# near it); the history stores a world size as an INTEGER (at most 2^31 - 1). A time above a week
# (commbench's longest --timeout) is no iteration's: such values, as 1e308, overflow every sum.
LARGEST_WHOLE = 2**53
LARGEST_WORLD = 2**31 - 1
LARGEST_TIME_US = 7 * 24 * 3600 * 1e6
SIZE = CellRule(True, 0, True, LARGEST_WHOLE, "a size (a whole number of bytes, from 0 to 2^53)")
COUNT = CellRule(True, 0, True, LARGEST_WHOLE, "a count (a whole number, from 0 to 2^53)")
RANKS = CellRule(True, 1, True, LARGEST_WORLD, "a rank count (a whole number, from 1 to 2^31 - 1)")
TIME = CellRule(False, 0, False, LARGEST_TIME_US, "a time (a finite number of us above 0, at most a week)")
SPREAD = CellRule(False, 0, True, math.inf, "a finite number, 0 or more")
CHECKED_CELLS = {
    "size_bytes": SIZE,
    "world_size": RANKS,
    **dict.fromkeys(("time_us_min", "time_us_p50", "time_us_p95", "time_us_max"), TIME),
    **dict.fromkeys(("time_us_p50_lo", "time_us_p50_hi", HEADLINE, HEADLINE_LO, HEADLINE_HI), TIME),
    **dict.fromkeys(("time_us_std", "busbw_gbps"), SPREAD),
}
