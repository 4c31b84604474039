"""`commbench history import`: result CSVs written before the history existed (schema versions 1 and
2), filed as runs. Idempotent: a run already in the history (by its run id) is left as it is, so
importing the same files twice, or a file whose run filed itself live, changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from commbench.history.recorder import COMPLETE, INCOMPLETE, RunInfo, insert_rows, insert_run
from commbench.history.store import History
from commbench.provenance import differences, env_path, fingerprint, read_env
from commbench.results import nccl_tests
from commbench.results.reader import read_one
from commbench.results.schema import STOPPED, rank_hosts


@dataclass(frozen=True)
class Imported:
    """One run of one file, and what became of it."""

    path: Path
    run_id: str
    rows: int
    added: bool  # False: the run was in the history already


def import_csvs(history: History, paths: list[Path]) -> list[Imported]:
    """File every run of every CSV; each run is one transaction."""
    done = []
    for path in paths:
        read_one(path)  # every check a reader makes (missing, empty, another schema, the raw file)
        cells = (
            nccl_tests.read_cells(path)
            if nccl_tests.is_nccl_tests(path)
            else pd.read_csv(path, dtype=str, keep_default_na=False)
        )
        for run_id, rows in cells.groupby("run_id", sort=False):
            done.append(Imported(Path(path), str(run_id), len(rows), _import_run(history, Path(path), rows)))
    return done


def _import_run(history: History, path: Path, rows: pd.DataFrame) -> bool:
    from sqlalchemy import text
    from sqlalchemy.exc import IntegrityError

    from commbench.history.store import RUNS

    records = rows.to_dict("records")
    run = _run_info(path, rows)
    try:
        with history.begin() as conn:
            if conn.execute(text(f"SELECT 1 FROM {RUNS} WHERE run_id = :r"), {"r": run.run_id}).first():
                return False
            insert_run(conn, run)
            insert_rows(conn, run.run_id, 0, records)
    except IntegrityError:  # another import of the same run won the race: it is there now
        return False
    return True


def _run_info(path: Path, rows: pd.DataFrame) -> RunInfo:
    first = rows.iloc[0]
    column = lambda name: str(first[name]) if name in rows.columns else ""  # noqa: E731
    document = environment(path, rows)
    stamps = sorted(t for t in rows.get("timestamp", pd.Series(dtype=str)) if t)
    command = column("command")
    words = command.split()
    kind = words[1] if len(words) > 1 and words[1] in ("sweep", "syncbn") else "sweep"
    if nccl_tests.is_nccl_tests(path):
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


def environment(path: Path, rows: pd.DataFrame) -> dict[str, Any]:
    """The run's <stem>.env.json where it lies beside the CSV; else what the CSV itself says (its
    versions and layout, no host details), with a fingerprint of that, marked `from_csv`; for
    nccl-tests' JSON, what it says of its hosts, marked `from_nccl_tests`."""
    if nccl_tests.is_nccl_tests(path):
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
    variables of its env) and its layout, fingerprinted as commbench fingerprints its own runs."""
    found = nccl_tests.environment(path)
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
        "run_id": str(rows["run_id"].iloc[0]),
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
    kept = [d for d in done if not d.added]
    files = len({d.path for d in done})
    text = f"# imported {len(added)} run{'s' if len(added) != 1 else ''} ({sum(d.rows for d in added)} rows) "
    text += f"from {files} file{'s' if files != 1 else ''} into {label}"
    if kept:
        text += f"; {len(kept)} run{'s were' if len(kept) != 1 else ' was'} there already ({', '.join(d.run_id for d in kept[:4])}{' ...' if len(kept) > 4 else ''})"
    return text
