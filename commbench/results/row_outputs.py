"""Where a run's rows go as they complete: every destination is one RowOutput, and rank 0's Sink
(commbench/run/sink.py) hands each row to the list of them. A new destination (the history, a
replay's rows, the Prometheus exporter: commbench/results/metrics_output.py) is one class here or
in its own module, never another parameter of the Sink.

An output sees three moments: each row (the row as the CSV holds it, and the measurement it came
from, None for an `unavailable` row); close, once no more rows come, however the run ended; and
finish, only when the run completed, which says whether the output delivered what it holds."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from commbench.results.measurement import Measurement
from commbench.results.paths import raw_path
from commbench.results.schema import CASE_KEY, COLUMNS, RAW_COLUMNS
from commbench.results.writer import CsvAppender


class RowOutput:
    """One destination of a run's rows. phase: the phase clock's name for the time spent in it."""

    phase = "write"

    def add(self, row: Mapping[str, Any], m: Measurement | None) -> None:
        raise NotImplementedError

    def close(self, interrupted: bool) -> None:
        """No more rows come (the run completed, failed or was stopped: interrupted)."""

    def finish(self) -> bool:
        """The run completed: deliver what must wait for its end; False when that failed (a warning said why)."""
        return True


class CsvRows(RowOutput):
    """The results CSV: one durable line per row (commbench/results/writer.py)."""

    def __init__(self, path: Path, overwrite: bool = False, append: bool = False) -> None:
        self.writer = CsvAppender(path, COLUMNS, overwrite=overwrite, append=append)

    def add(self, row: Mapping[str, Any], m: Measurement | None) -> None:
        self.writer.write(dict(row))

    def close(self, interrupted: bool) -> None:
        self.writer.close()


# What names one row's samples in <stem>.raw.csv: its run and its case.
RAW_KEY = ("run_id", *CASE_KEY)


class RawSamples(RowOutput):
    """--raw: every iteration's time on every rank, in <stem>.raw.csv beside the CSV."""

    def __init__(self, path: Path, overwrite: bool = False, append: bool = False) -> None:
        self.writer = CsvAppender(raw_path(path), RAW_COLUMNS, overwrite=overwrite, append=append)

    def add(self, row: Mapping[str, Any], m: Measurement | None) -> None:
        if m is None:
            return
        key = {k: row[k] for k in RAW_KEY}
        round_of = [r for r, block in enumerate(m.rounds_us) for _ in block]
        self.writer.write_many(
            {**key, "round": round_of[i], "iteration": i, "rank": r, "time_us": t}
            for r, samples in enumerate(m.per_rank_us)
            for i, t in enumerate(samples)
        )

    def close(self, interrupted: bool) -> None:
        self.writer.close()


def csv_outputs(path: Path, overwrite: bool = False, raw: bool = False, append: bool = False) -> list[RowOutput]:
    """The outputs every measuring run has: its CSV, and its raw samples under --raw."""
    return [CsvRows(path, overwrite, append), *([RawSamples(path, overwrite, append)] if raw else [])]
