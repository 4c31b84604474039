"""A run's record at its start: every host's environment gathered to rank 0 once, written beside
the CSV, its differences warned about, and the run filed in the history.

The lowest rank of each host (its local rank 0 wherever the launcher numbers local ranks) collects
the host's record (commbench/provenance.py). Rank 0 needs them all, the other ranks none: where
the job has a rendezvous store, each reporting rank sets one key and rank 0 reads one key per
host, so nothing grows with the world size on any rank but rank 0, and with the host count there.
Without a store (a user's horovodrun), one all-gather of the records, once per run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import commbench
from commbench.errors import UserError, warn
from commbench.provenance import collect_host, env_document, env_path, write_env

if TYPE_CHECKING:
    from commbench.backends.base import Backend
    from commbench.history.recorder import RunRecorder
    from commbench.history.store import History


def gather_host_envs(
    backend: Backend, backend_name: str, run_id: str, rank_hosts: tuple[str, ...], master_addr: str | None, store: Any
) -> list[dict[str, Any]] | None:
    """On rank 0, every host's record in the order its hosts first appear; None on the other ranks.

    Only rank 0 holds every rank's host (under --group world the others hold none), so each rank
    claims its own host in the store (one add: the first claim wins) and the winner reports.
    """
    host = backend.node_info()["host"]
    lead = backend.rank == 0
    if store is None:  # no store (a user's horovodrun): the hosts, then the reporters' records, once
        hosts = backend.all_gather_object(host)
        mine = _collect(backend, backend_name, master_addr, host) if hosts.index(host) == backend.rank else None
        everyone = backend.all_gather_object(mine)
        return [_counted(r, hosts) for r in everyone if r is not None] if lead else None
    import torch.distributed as dist

    scoped = dist.PrefixStore(f"host-env/{run_id}", store)
    claimed = scoped.add(f"claim/{host}", 1) == 1
    mine = _collect(backend, backend_name, master_addr, host) if claimed else None
    if not lead:
        if mine is not None:
            scoped.set(host, json.dumps(mine))
        return None
    records = []
    for other in dict.fromkeys(rank_hosts):
        if other == host and mine is not None:
            records.append(_counted(mine, list(rank_hosts)))
            continue
        try:  # get() waits for the key, up to the store's timeout
            records.append(_counted(json.loads(scoped.get(other)), list(rank_hosts)))
        except RuntimeError as exc:  # torch's store errors; a host whose reporter died fails the run soon anyway
            reason = (str(exc).strip().splitlines() or ["no answer"])[0]
            warn(f"no environment record from host {other}: {reason}")
    return records


def _collect(backend: Backend, backend_name: str, master_addr: str | None, host: str) -> dict[str, Any]:
    return collect_host(backend_name, backend.version(), 1, master_addr, host=host)


def _counted(record: dict[str, Any], hosts: list[str]) -> dict[str, Any]:
    """The record with its host's rank count, which only a rank that knows every rank's host can say."""
    return {**record, "ranks": hosts.count(record["host"])}


def begin_record(
    path: Path,
    run_id: str,
    run_layout: Mapping[str, Any],
    host_envs: list[dict[str, Any]],
    command: str,
    history: History | None,
    record_path: Path | None = None,
) -> tuple[dict[str, str], RunRecorder | None]:
    """Write <stem>.env.json, warn once when the hosts differ, and file the run in the history.

    Returns the columns every row carries (the fingerprint and the env file's name) and the
    history's recorder (None without a history, or when the database failed since it was opened:
    that costs the history a run, never the run itself).
    """
    from commbench.history.recorder import RunInfo, RunRecorder, now

    document = env_document(run_id, run_layout, host_envs)
    write_env(record_path or path, document)
    if document["differences"]:
        warn(f"the hosts differ: {'; '.join(document['differences'])}")
    columns = {"fingerprint": document["fingerprint"], "env_file": env_path(record_path or path).name}
    if history is None:
        return columns, None
    words = command.split()
    run = RunInfo(
        run_id=run_id,
        fingerprint=document["fingerprint"],
        kind=words[1] if len(words) > 1 and words[1] in ("sweep", "syncbn", "replay") else "sweep",
        command=command,
        backend=str(run_layout["backend"]),
        world_size=int(run_layout["world_size"]),
        hosts=tuple(str(r["host"]) for r in host_envs),
        source=str(Path(path).resolve()),
        commbench_version=commbench.__version__,
        provenance=document,
        started_at=now(),
    )
    try:
        return columns, RunRecorder(history, run)
    except UserError as exc:
        warn(f"this run is not in the history: {exc.format_message()}")
        history.close()
        return columns, None
