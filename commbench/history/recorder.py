"""A run files itself in the history as it goes: the run when it starts, each row as it completes.

Every write is its own transaction: a run killed at any moment leaves its run record (status
`incomplete`) and every row it completed, and never a part of a row. A database that fails mid-run
costs the history, not the run: one warning, and the CSV goes on.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from commbench.errors import UserError, warn
from commbench.history.store import HOSTS, ROWS, RUNS, History, number
from commbench.redact import redact
from commbench.results.schema import COLUMNS
from commbench.results.writer import cells

INCOMPLETE, COMPLETE = "incomplete", "complete"
# Every row the run measured, though not all filed live: the database failed mid-run and
# `commbench history import` of the run's CSV filed the rest. As good as complete for comparisons.
RECOVERED = "recovered"
INTERRUPTED = "interrupted"  # stopped by Ctrl-C, SIGTERM or SIGHUP: the rows it measured, no more


def now() -> str:
    """UTC time as stored: ISO 8601 to the second, which sorts as text on every database."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class RunInfo:
    """What the history keeps about a run besides its rows."""

    run_id: str
    fingerprint: str
    kind: str  # sweep, syncbn, or import
    command: str
    backend: str
    world_size: int
    hosts: tuple[str, ...]
    source: str  # the CSV
    commbench_version: str
    provenance: Mapping[str, Any]  # the <stem>.env.json document, or what a CSV alone says
    started_at: str
    ended_at: str | None = None
    status: str = INCOMPLETE


def insert_run(conn: Any, run: RunInfo) -> None:
    """The run and its hosts, in the caller's transaction."""
    from sqlalchemy import text

    conn.execute(
        text(
            f"INSERT INTO {RUNS} (run_id, fingerprint, kind, command, backend, world_size, hosts, started_at, "
            "ended_at, status, source, commbench_version, provenance) VALUES (:run_id, :fingerprint, :kind, "
            ":command, :backend, :world_size, :hosts, :started_at, :ended_at, :status, :source, "
            ":commbench_version, :provenance)"
        ),
        {
            **{k: getattr(run, k) for k in RunInfo.__dataclass_fields__ if k not in ("hosts", "provenance")},
            "command": redact(run.command),  # a CSV written before redaction may carry a password: never filed
            "hosts": ";".join(run.hosts),
            "provenance": json.dumps(run.provenance, sort_keys=True),
        },
    )
    for host in sorted(set(run.hosts)):
        conn.execute(text(f"INSERT INTO {HOSTS} (run_id, host) VALUES (:r, :h)"), {"r": run.run_id, "h": host})


def insert_rows(conn: Any, run_id: str, first_seq: int, rows: list[Mapping[str, Any]]) -> None:
    """Rows as CSV cells (the data column keeps every column as the CSV has it), numbered from first_seq."""
    from sqlalchemy import text

    if not rows:
        return
    conn.execute(
        text(
            f"INSERT INTO {ROWS} (run_id, seq, op, variant, phase, dtype, mode, size_bytes, grp, world_size, "
            "status, time_us_p50, time_us_p50_lo, time_us_p50_hi, data) VALUES (:run_id, :seq, :op, :variant, "
            ":phase, :dtype, :mode, :size_bytes, :grp, :world_size, :status, :p50, :lo, :hi, :data)"
        ),
        [_row_values(run_id, first_seq + i, row) for i, row in enumerate(rows)],
    )


def _row_values(run_id: str, seq: int, row: Mapping[str, Any]) -> dict[str, Any]:
    size, world = number(row.get("size_bytes")), number(row.get("world_size"))
    return {
        "run_id": run_id,
        "seq": seq,
        **{k: str(row.get(k) or "") for k in ("op", "variant", "phase", "dtype", "mode", "status")},
        "size_bytes": None if size is None else int(size),
        "grp": str(row.get("group") or "world"),
        "world_size": None if world is None else int(world),
        "p50": number(row.get("time_us_p50")),
        "lo": number(row.get("time_us_p50_lo")),
        "hi": number(row.get("time_us_p50_hi")),
        "data": json.dumps(
            {c: redact(str(row[c])) if c == "command" else row[c] for c in COLUMNS if row.get(c, "") != ""}
        ),
    }


class RunRecorder:
    """One live run's writer; the sink calls add() for every row it writes to the CSV."""

    def __init__(self, history: History, run: RunInfo) -> None:
        self.history = history
        self.run_id = run.run_id
        self.seq = 0
        self.failed = False
        with history.begin() as conn:
            insert_run(conn, run)

    def add(self, row: Mapping[str, Any]) -> None:
        """File one row (as the CSV writes it) in a transaction of its own."""
        if self.failed:
            return
        self._write(lambda conn: insert_rows(conn, self.run_id, self.seq, [cells(row)]))
        self.seq += 1

    def end(self, completed: bool = False, interrupted: bool = False) -> None:
        """The run ended: when, and how (complete; interrupted by Ctrl-C, SIGTERM or SIGHUP; else
        incomplete, a run that stopped early)."""
        from sqlalchemy import text

        sql = text(f"UPDATE {RUNS} SET ended_at = :t, status = :s WHERE run_id = :r")
        status = COMPLETE if completed else INTERRUPTED if interrupted else INCOMPLETE
        self._write(lambda conn: conn.execute(sql, {"t": now(), "s": status, "r": self.run_id}))

    def close(self) -> None:
        self.history.close()

    def _write(self, action: Any) -> None:
        if self.failed:
            return
        from sqlalchemy.exc import SQLAlchemyError

        try:
            with self.history.begin() as conn:
                action(conn)
        except (UserError, SQLAlchemyError) as exc:
            self.failed = True
            why = exc.format_message() if isinstance(exc, UserError) else type(exc).__name__
            warn(
                f"the history {self.history.label} stopped taking rows ({why}); "
                f"the CSV has them all (`commbench history import` files it later)"
            )
