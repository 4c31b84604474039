"""Rank 0's outputs as a sweep goes: one row per measurement, handed to the run's row outputs
(results/row_outputs.py: the CSV, raw samples, the history, metrics), the printed table and the
progress line. Rows are built here, next to the schema they fill."""

from __future__ import annotations

import datetime
import statistics
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import commbench
from commbench.console import table
from commbench.console.display import Display, Status
from commbench.errors import signals_held
from commbench.provenance import record_wall_time
from commbench.results.budget import Budget
from commbench.results.measurement import Measurement
from commbench.results.noise import NOISE_COLUMNS, HostLoad, summarise_noise
from commbench.results.row_outputs import RowOutput
from commbench.results.schema import SCHEMA_VERSION, STOPPED, rank_hosts
from commbench.results.stats import (
    HEADLINE_ROUNDS,
    Stats,
    bandwidth_gbps,
    modes_note,
    noisy,
    overlap_fraction,
    percentile,
)
from commbench.run.phases import PhaseClock

if TYPE_CHECKING:
    from commbench.history.recorder import RunRecorder


class Sink:
    """Hands each row, as it completes, to the run's row outputs (the CSV, raw samples, the history,
    a replay's rows, metrics: commbench/results/row_outputs.py) and prints it in the table; run facts
    (run id, hosts, versions) are the same on every row."""

    def __init__(
        self,
        path: Path,
        base: dict[str, Any],
        display: Display,
        outputs: list[RowOutput],
        phases: PhaseClock | None = None,
    ) -> None:
        self.path = path
        self.phases = PhaseClock() if phases is None else phases
        self.started = time.monotonic()
        self.interrupted = False  # set when Ctrl-C, SIGTERM or SIGHUP stopped the run
        self.base = {"schema_version": SCHEMA_VERSION, "commbench_version": commbench.__version__, **base}
        self.display = display
        self.outputs = outputs  # a command adds its own before the first row (replay's rows)
        self.table = table.Table.fitted({})

    def section(self, title: str, names: dict[str, Iterable[str]]) -> None:
        """A header for the rows that follow, its columns fitted to the names they will print."""
        self.table = table.Table.fitted(names)
        self.display.write(self.table.header(title))

    def progress(self, status: Status) -> None:
        with self.phases.phase("progress"):
            self.display.status(status)

    def unavailable(self, op: str, variant: str, dtype: str, reason: str) -> None:
        row = {**self.base, "timestamp": _now(), "op": op, "variant": variant, "dtype": dtype}
        row.update(status="unavailable", note=reason)
        self._file(row)
        with self.phases.phase("write"):
            self.display.write(self.table.line(row))

    def _file(self, row: dict[str, Any], m: Measurement | None = None) -> None:
        """The row in every output (the CSV and the history: in both or in neither)."""
        with signals_held():
            for output in self.outputs:
                with self.phases.phase(output.phase):
                    output.add(row, m)

    def measured(self, m: Measurement) -> None:
        with self.phases.phase("write"):
            row = self.row(m)
            self._file(row, m)
            self.display.write(self.table.line(row))

    def row(self, m: Measurement) -> dict[str, Any]:
        stats = Stats.from_samples([t for block in m.rounds_us for t in block])
        round_p50s = [percentile(sorted(block), 50) for block in m.rounds_us]
        round_means = [statistics.fmean(block) for block in m.rounds_us]
        algbw, busbw = bandwidth_gbps(m.size_bytes, stats.headline, m.bus_factor)
        notes = [m.note] if m.note else []
        if (why := noisy(stats, round_means)) is not None:
            notes.append(why)
        if (modes := modes_note([t for block in m.rounds_us for t in block])) is not None:
            notes.append(modes)
        if m.wrong < 0 and not m.stopped:  # a stopped case's note says why its check never ran
            notes.append("check skipped")
        return {
            **self.base,
            "timestamp": _now(),
            **{
                k: getattr(m, k)
                for k in ("op", "variant", "phase", "dtype", "size_bytes", "count", "wrong", "window", "timer")
            },
            "api": m.apis,
            "calls": round(m.calls, 3),
            "iters": sum(len(block) for block in m.rounds_us),
            "rounds": len(m.rounds_us),
            **stats.as_dict(),
            "time_us_p50_rounds": ";".join(f"{p:.6g}" for p in round_p50s),
            HEADLINE_ROUNDS: ";".join(f"{p:.6g}" for p in round_means),
            "algbw_gbps": algbw,
            "busbw_gbps": busbw,
            "status": "wrong" if m.wrong > 0 else STOPPED if m.stopped else "ok",
            "note": "; ".join(notes),
            **_overlap_columns(m, stats.time_us_p50),
        }

    def close(self) -> None:
        self.display.close()
        for output in self.outputs:  # the history says incomplete (or interrupted) until finish()
            output.close(self.interrupted)

    def finish(self, wrong_total: int) -> bool:
        """The run completed: each output delivers what waits for the end (the history marked
        complete, metrics written and pushed), then the closing lines. False when an output could
        not deliver (a push that failed: its warning says so; the CSV holds every row)."""
        delivered = True
        for output in self.outputs:
            with self.phases.phase(output.phase):
                delivered = output.finish() and delivered
        wall_s = time.monotonic() - self.started
        # So that a report of this CSV advises as this line does, and the CSV's owner prints where the time went.
        record_wall_time(self.path, wall_s, self.phases.record())
        if wrong_total:
            self.display.write(
                f"# FAILED: {wrong_total} wrong elements in total; see the 'wrong' column of {self.path}"
            )
        else:
            self.display.write(f"# done: results in {self.path}")
        return delivered


class NoiseSummary(RowOutput):
    """The line that says how many rows are noisy and why (results/noise.py), printed when the run completes."""

    phase = "progress"

    def __init__(self, display: Display, budget: Budget, base: dict[str, Any]) -> None:
        self.display, self.budget, self.base = display, budget, base
        self.rows: list[dict[str, Any]] = []  # what the noise summary needs of each measured row
        self.started = time.monotonic()

    def add(self, row: Mapping[str, Any], m: Measurement | None) -> None:
        if m is not None:
            self.rows.append({k: row[k] for k in NOISE_COLUMNS})

    def finish(self) -> bool:
        wall_s = time.monotonic() - self.started
        summary = summarise_noise(self.rows, self.budget, wall_s, HostLoad.here(_ranks_here(self.base)))
        if summary is not None:
            self.display.write(summary.line())
        return True


class HistoryRows(RowOutput):
    """Each row filed in the results history as it is written (commbench/history/recorder.py)."""

    phase = "history"

    def __init__(self, recorder: RunRecorder) -> None:
        self.recorder = recorder

    def add(self, row: Mapping[str, Any], m: Measurement | None) -> None:
        self.recorder.add(row)

    def close(self, interrupted: bool) -> None:
        self.recorder.end(interrupted=interrupted)  # incomplete until finish() says the run completed

    def finish(self) -> bool:
        self.recorder.end(completed=True)
        self.recorder.close()
        return True


def _ranks_here(base: dict[str, Any]) -> int:
    """How many of the run's ranks share rank 0's host."""
    hosts = rank_hosts(str(base.get("node_ranks") or ""))
    return hosts.count(hosts[0]) if hosts else 1


def _overlap_columns(m: Measurement, comm_us: float) -> dict[str, float]:
    """comm_us, compute_us, overlapped_us (p50s) and the overlap fraction, for --overlap rows."""
    if not m.compute_flops:
        return {}
    compute_us, overlapped_us = (
        percentile(sorted(t for block in rounds for t in block), 50)
        for rounds in (m.compute_rounds_us, m.overlapped_rounds_us)
    )
    return {
        "comm_us": comm_us,
        "compute_us": compute_us,
        "overlapped_us": overlapped_us,
        "overlap": overlap_fraction(comm_us, compute_us, overlapped_us),
        "compute_flops": m.compute_flops,
    }


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
