"""`commbench history import`: result CSVs written before the history existed (schema versions 1 and
2), and nccl-tests' output (its -J files and its text logs, each test of a log a run of its own),
filed as runs. Idempotent: a run already in the history (by its run id) keeps what it has, so
importing the same files twice, or a file whose run filed itself live, changes nothing; a run the
history holds only part of (its database went down mid-run) gets the rows its CSV has beyond them,
and its status says so (`recovered`, or still `incomplete` / `interrupted` when the CSV says the
run itself stopped early).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from commbench.history.recorder import COMPLETE, INCOMPLETE, RECOVERED, RunInfo, insert_rows, insert_run
from commbench.history.store import ROWS, RUNS, History
from commbench.provenance import differences, env_path, fingerprint, read_env
from commbench.results import nccl_tests, nccl_tests_log
from commbench.results.reader import CSV, JSON, nccl_tests_cells, read_cells, source_kind
from commbench.results.schema import ROW_KEY, STOPPED, rank_hosts


@dataclass(frozen=True)
class Imported:
    """One run of one file, and what became of it."""

    path: Path
    run_id: str
    rows: int
    added: bool  # False: the run was in the history already
    recovered: int = 0  # rows added to a run the history held only part of
    had: int = 0  # the rows that run held before


def import_csvs(history: History, paths: list[Path]) -> list[Imported]:
    """File every run of every CSV; each run is one transaction."""
    done = []
    for path in paths:
        # Every check a reader makes (missing, empty, another schema, the raw file), and the rows it
        # keeps: a cut, malformed or impossible row is named and never filed.
        cells = read_cells(path)
        for run_id, rows in cells.groupby("run_id", sort=False):
            done.append(_import_run(history, Path(path), str(run_id), rows))
    return done


def _import_run(history: History, path: Path, run_id: str, rows: pd.DataFrame) -> Imported:
    from sqlalchemy import text
    from sqlalchemy.exc import IntegrityError

    records = rows.to_dict("records")
    run = _run_info(path, rows)
    try:
        with history.begin() as conn:
            status = conn.execute(text(f"SELECT status FROM {RUNS} WHERE run_id = :r"), {"r": run.run_id}).scalar()
            if status is not None:
                return _complete_run(conn, path, run, status, records)
            insert_run(conn, run)
            insert_rows(conn, run.run_id, 0, records)
    except IntegrityError:  # another import of the same run won the race: it is there now
        return Imported(path, run_id, len(rows), False)
    return Imported(path, run_id, len(rows), True)


def _complete_run(conn: Any, path: Path, run: RunInfo, status: str, records: list[dict[str, Any]]) -> Imported:
    """A run the history has: the CSV's rows it lacks (matched by row key) added after its own, in
    the caller's transaction. A run that filed itself whole, or was completed before, gets nothing."""
    from sqlalchemy import text

    stored = conn.execute(text(f"SELECT seq, data FROM {ROWS} WHERE run_id = :r"), {"r": run.run_id}).all()
    have = {_key(json.loads(data)) for _, data in stored}
    missing = [r for r in records if _key(r) not in have]
    if not missing or status == COMPLETE:
        return Imported(path, run.run_id, len(records), False)
    insert_rows(conn, run.run_id, max((seq for seq, _ in stored), default=-1) + 1, missing)
    # The CSV says whether the run itself completed; the history only lost rows of it.
    done = RECOVERED if run.status == COMPLETE else status
    conn.execute(
        text(f"UPDATE {RUNS} SET status = :s, ended_at = COALESCE(ended_at, :t) WHERE run_id = :r"),
        {"s": done, "t": run.ended_at, "r": run.run_id},
    )
    return Imported(path, run.run_id, len(records), False, recovered=len(missing), had=len(stored))


def _key(cells: dict[str, Any]) -> tuple[str, ...]:
    """A row's key as text, the same for a CSV's cells and the history's stored data."""
    return tuple(str(cells.get(c, "") or ("world" if c == "group" else "")) for c in ROW_KEY)


def _run_info(path: Path, rows: pd.DataFrame) -> RunInfo:
    first = rows.iloc[0]
    column = lambda name: str(first[name]) if name in rows.columns else ""  # noqa: E731
    document = environment(path, rows)
    stamps = sorted(t for t in rows.get("timestamp", pd.Series(dtype=str)) if t)
    command = column("command")
    words = command.split()
    kind = words[1] if len(words) > 1 and words[1] in ("sweep", "syncbn", "replay") else "sweep"
    if source_kind(path) != CSV:
        kind = "nccl-tests"
    stopped = (rows.get("status", pd.Series(dtype=str)) == STOPPED).any() or (
        rows.get("note", pd.Series(dtype=str)).str.contains("stopped after", regex=False).any()  # before `stopped`
    )
    return RunInfo(
        run_id=column("run_id"),
        fingerprint=column("fingerprint") or document["fingerprint"],
        kind=kind,
        command=command,
        backend=column("backend"),
        world_size=int(float(column("world_size") or 0)),
        hosts=tuple(h for h in column("hosts").split(";") if h),
        source=str(path.resolve()),
        commbench_version=column("commbench_version"),
        provenance=document,
        started_at=stamps[0] if stamps else "",
        ended_at=_ended(document) or (stamps[-1] if stamps else None),
        status=INCOMPLETE if stopped else COMPLETE,
    )


def _ended(document: dict[str, Any]) -> str | None:
    """nccl-tests records when it ended; a CSV's last row says it for commbench's runs."""
    end = (document.get("nccl_tests") or {}).get("end_time")
    return str(end).replace(" ", "T") if end else None


def fingerprint_of(path: Path) -> str:
    """The fingerprint a file's run is filed under (as `history import` files it), for a file that
    records none: commbench's CSVs written before fingerprints, and nccl-tests' output."""
    kind = source_kind(path)
    cells = pd.read_csv(path, dtype=str, keep_default_na=False) if kind == CSV else nccl_tests_cells(path, kind)
    return str(environment(Path(path), cells)["fingerprint"])


def environment(path: Path, rows: pd.DataFrame) -> dict[str, Any]:
    """The run's <stem>.env.json where it lies beside the CSV; else what the CSV itself says (its
    versions and layout, no host details), with a fingerprint of that, marked `from_csv`; for
    nccl-tests' output, what it says of its hosts, marked `from_nccl_tests`."""
    if source_kind(path) != CSV:
        return nccl_tests_environment(path, rows)
    named = str(rows["env_file"].iloc[0]) if "env_file" in rows.columns else ""
    candidate = path.with_name(named) if named else env_path(path)
    if candidate.is_file():
        document = read_env(candidate)
        if document.get("run_id") == str(rows["run_id"].iloc[0]):
            return document
    first = rows.iloc[0]
    get = lambda name: str(first[name]) if name in rows.columns else ""  # noqa: E731
    hosts = rank_hosts(get("node_ranks"))
    per_host = sorted(hosts.count(h) for h in dict.fromkeys(hosts)) or [int(float(get("world_size") or 0))]
    windows = pd.to_numeric(rows.get("window", pd.Series(dtype=str)), errors="coerce").dropna()
    run_layout = {
        "backend": get("backend"),
        "world_size": int(float(get("world_size") or 0)),
        "hosts": len(per_host),
        "ranks_per_host": per_host,
        "group": get("group") or "world",
        "mode": get("mode") or "blocking",
        "window": int(windows.max()) if len(windows) and get("mode") == "nonblocking" else 1,
        "device": "unknown",
    }
    record = {
        "torch": get("torch_version"),
        "backend_version": get("backend_version"),
        "commbench": get("commbench_version"),
    }
    return {
        "format": 1,
        "run_id": get("run_id"),
        "from_csv": True,
        "fingerprint": fingerprint(run_layout, [record]),
        "layout": run_layout,
        "hosts": [{"host": h, **record} for h in dict.fromkeys(hosts)],
        "differences": [],
    }


def nccl_tests_environment(path: Path, rows: pd.DataFrame) -> dict[str, Any]:
    """The provenance of an nccl-tests run: its hosts (devices, NCCL's version, the transport
    variables of its env) and its layout, fingerprinted as commbench fingerprints its own runs;
    `rows` are the run's own (one test of a log that holds several)."""
    run_id = str(rows["run_id"].iloc[0])
    found = nccl_tests.environment(path) if source_kind(path) == JSON else nccl_tests_log.environment(path, run_id)
    records = found.pop("hosts")
    per_host = sorted(r["ranks"] for r in records) or [int(float(rows["world_size"].iloc[0] or 0))]
    run_layout = {
        "backend": "nccl",
        "world_size": int(float(rows["world_size"].iloc[0] or 0)),
        "hosts": len(per_host),
        "ranks_per_host": per_host,
        "group": "world",
        "mode": "blocking",
        "window": 1,
        "device": "cuda",
    }
    return {
        "format": 1,
        "run_id": run_id,
        "from_nccl_tests": True,
        "fingerprint": fingerprint(run_layout, records),
        "layout": run_layout,
        "hosts": records,
        "differences": differences(records),
        "nccl_tests": found,
    }


def summary(done: list[Imported], label: str) -> str:
    """One line: what the import added and what it found there already."""
    added = [d for d in done if d.added]
    recovered = [d for d in done if d.recovered]
    kept = [d for d in done if not d.added and not d.recovered]
    files = len({d.path for d in done})
    text = f"# imported {len(added)} run{'s' if len(added) != 1 else ''} ({sum(d.rows for d in added)} rows) "
    text += f"from {files} file{'s' if files != 1 else ''} into {label}"
    for d in recovered:
        text += (
            f"; completed run {d.run_id} from its CSV: the history had {d.had} of its {d.had + d.recovered} rows, "
            f"{d.recovered} added"
        )
    if kept:
        text += f"; {len(kept)} run{'s were' if len(kept) != 1 else ' was'} there already ({', '.join(d.run_id for d in kept[:4])}{' ...' if len(kept) > 4 else ''})"
    return text
