"""Questions the history answers: which runs, one run in full, a row's values across runs, and the
runs a candidate is judged against."""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from commbench.errors import UserError
from commbench.history.recorder import COMPLETE, RECOVERED
from commbench.history.store import HOSTS, ROWS, RUNS, History

if TYPE_CHECKING:  # pandas is imported where rows are read: a sweep's first run asks only whether a run exists
    import pandas as pd

RUN_FIELDS = (
    "run_id",
    "fingerprint",
    "kind",
    "command",
    "backend",
    "world_size",
    "hosts",
    "started_at",
    "ended_at",
    "status",
    "source",
    "commbench_version",
)


def parse_when(text: str, flag: str, end_of_day: bool = False) -> str:
    """A date (2026-12-01) or a date and time, as the stored UTC text it compares with; a bare date
    given as an end (--until) means the end of that day."""
    try:
        when = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise UserError(f"{flag} takes a date such as 2026-12-01 or 2026-12-01T14:30 (got {text!r})") from None
    if end_of_day and len(text.strip()) <= 10:
        when += datetime.timedelta(days=1) - datetime.timedelta(seconds=1)
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.astimezone(datetime.timezone.utc).isoformat(timespec="seconds")


def list_runs(
    history: History,
    op: str | None = None,
    fingerprint: str | None = None,
    host: str | None = None,
    since: str | None = None,
    until: str | None = None,
    last: int | None = None,
) -> list[dict[str, Any]]:
    """Runs, oldest first, with their row counts and `--repeat` group (launch_group, launch: None
    outside a group); each filter narrows (fingerprint matches a prefix)."""
    from sqlalchemy import text

    where, params = [], {}
    if op:
        where.append(f"EXISTS (SELECT 1 FROM {ROWS} w WHERE w.run_id = r.run_id AND w.op = :op)")
        params["op"] = op
    if fingerprint:
        where.append("r.fingerprint LIKE :fp")
        params["fp"] = fingerprint + "%"
    if host:
        where.append(f"EXISTS (SELECT 1 FROM {HOSTS} h WHERE h.run_id = r.run_id AND h.host = :host)")
        params["host"] = host
    if since:
        where.append("r.started_at >= :since")
        params["since"] = since
    if until:
        where.append("r.started_at <= :until")
        params["until"] = until
    sql = (
        f"SELECT {', '.join('r.' + f for f in RUN_FIELDS)}, "
        f"(SELECT COUNT(*) FROM {ROWS} w WHERE w.run_id = r.run_id) AS rows "
        f"FROM {RUNS} r {'WHERE ' + ' AND '.join(where) if where else ''} ORDER BY r.started_at DESC, r.run_id"
        + (" LIMIT :last" if last else "")
    )
    if last:
        params["last"] = last
    with history.read() as conn:
        found = [dict(row._mapping) for row in conn.execute(text(sql), params)]
        groups = _launch_groups(conn, [r["run_id"] for r in found])
    for r in found:
        r["launch_group"], r["launch"] = groups.get(r["run_id"], (None, None))
    return found[::-1]


def _launch_groups(conn: Any, run_ids: list[str]) -> dict[str, tuple[str, str | None]]:
    """The `sweep --repeat` group id and launch number of each run that is a group's launch (every
    row of a run carries the same two; its first row's data is read)."""
    from sqlalchemy import bindparam, text

    if not run_ids:
        return {}
    first = text(
        f"SELECT w.run_id, w.data FROM {ROWS} w WHERE w.run_id IN :ids "
        f"AND w.seq = (SELECT MIN(v.seq) FROM {ROWS} v WHERE v.run_id = w.run_id)"
    ).bindparams(bindparam("ids", expanding=True))
    groups = {}
    for run_id, data in conn.execute(first, {"ids": run_ids}):
        row = json.loads(data)
        if row.get("launch_group"):
            groups[run_id] = (str(row["launch_group"]), str(row["launch"]) if row.get("launch") else None)
    return groups


def find_run(history: History, ident: str) -> dict[str, Any]:
    """One run by its id or a unique prefix of it, with its provenance; unknown ids are refused."""
    from sqlalchemy import text

    with history.read() as conn:
        found = [
            dict(row._mapping)
            for row in conn.execute(
                text(f"SELECT {', '.join(RUN_FIELDS)}, provenance FROM {RUNS} WHERE run_id LIKE :p ORDER BY run_id"),
                {"p": ident.strip() + "%"},
            )
        ]
    exact = [r for r in found if r["run_id"] == ident.strip()]
    if exact:
        found = exact
    if not found or not ident.strip():
        raise UserError(f"no run {ident!r} in the history {history.label}; `commbench history list` shows the runs")
    if len(found) > 1:
        raise UserError(
            f"{ident!r} names {len(found)} runs ({', '.join(r['run_id'] for r in found[:4])}): give more of the id"
        )
    run = found[0]
    run["provenance"] = json.loads(run["provenance"] or "{}")
    return run


def run_rows(history: History, run_ids: Sequence[str]) -> pd.DataFrame:
    """The rows of these runs as the CSV readers type them, with each run's start time and
    fingerprint and status (history_started_at, history_fingerprint, history_status) and the run's
    id in `run`."""
    import pandas as pd
    from sqlalchemy import bindparam, text

    from commbench.results.reader import typed

    if not run_ids:
        return typed(pd.DataFrame(columns=["run_id"]), "history")
    sql = text(
        f"SELECT w.data, r.run_id, r.started_at, r.fingerprint, r.status FROM {ROWS} w JOIN {RUNS} r ON r.run_id = w.run_id "
        "WHERE w.run_id IN :ids ORDER BY r.started_at, w.seq"
    ).bindparams(bindparam("ids", expanding=True))
    with history.read() as conn:
        fetched = conn.execute(sql, {"ids": list(run_ids)}).all()
    cells = [{**json.loads(data), "run_id": run_id} for data, run_id, *_ in fetched]
    frame = typed(pd.DataFrame(cells, dtype=object).replace({"": pd.NA}), f"history {history.label}")
    frame["history_started_at"] = [row[2] for row in fetched]
    frame["history_fingerprint"] = [row[3] or "" for row in fetched]
    frame["history_status"] = [row[4] or "" for row in fetched]
    frame["run"] = frame["run_id"]
    return frame


def baseline_runs(
    history: History, fingerprint: str, before: str | None, exclude: str | None, last: int
) -> list[dict[str, Any]]:
    """The last `last` complete runs of one fingerprint that started before `before` (all when
    None), the run `exclude` left out; oldest first."""
    from sqlalchemy import text

    where = ["fingerprint = :fp", "status IN (:done, :recovered)"]
    params: dict[str, Any] = {"fp": fingerprint, "done": COMPLETE, "recovered": RECOVERED, "last": last}
    if before:
        where.append("started_at < :before")
        params["before"] = before
    if exclude:
        where.append("run_id <> :exclude")
        params["exclude"] = exclude
    sql = f"SELECT {', '.join(RUN_FIELDS)} FROM {RUNS} WHERE {' AND '.join(where)} ORDER BY started_at DESC LIMIT :last"
    with history.read() as conn:
        found = [dict(row._mapping) for row in conn.execute(text(sql), params)]
    return found[::-1]


def started_at(history: History, run_id: str) -> str | None:
    """When a run in the history started; None when it is not there."""
    from sqlalchemy import text

    with history.read() as conn:
        return conn.execute(text(f"SELECT started_at FROM {RUNS} WHERE run_id = :r"), {"r": run_id}).scalar()
