"""The ranks' agreement on their configuration, and on any rank's refusal to go on.

Before the first collective the ranks compare a digest of their SweepConfig, so a broken launch
script that hands ranks different options is caught with the name of the option that differs. The
comparison is one all_reduce of a few numbers; the ranks gather their per-option digests (to name
the option) only when the digests differ or a rank has an error to report.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from commbench.errors import UserError
from commbench.run.config import SWEEP_PROGRAM, SweepConfig
from commbench.run.groups import rank_groups, refusal

if TYPE_CHECKING:
    from commbench.backends.base import Backend


@dataclass(frozen=True)
class RunFacts:
    """What every rank learns from the agreement: rank 0's run id, and where every rank runs."""

    run_id: str
    hosts: str
    node_ranks: str
    # Every rank's host, by rank; on rank 0 only (the others hold the run id alone) under --group
    # world, where nothing else needs them.
    rank_hosts: tuple[str, ...]


class PeerError(Exception):
    """Another rank reported the error; it prints it, this rank exits quietly (under torchrun it
    hands the same line to torchrun's summary, naming the rank that found it)."""

    def __init__(self, message: str, finder: int = 0) -> None:
        super().__init__(message)
        self.message, self.finder = message, finder


def agree(
    backend: Backend, cfg: SweepConfig, error: str | None, ranks_error: Callable[[int], str | None] | None = None
) -> RunFacts:
    """Compare the configuration across ranks, share any rank's refusal, and rank 0's run facts.

    An error found by one rank (its memory, rank 0's output file) stops every rank: the rank that
    found it raises a UserError with the message, the others a quiet PeerError. What every rank
    sees (options that differ between ranks, a --group the hosts cannot form, ranks_error(n): an
    option the ops cannot use on the n ranks of each group, such as --root) rank 0 reports.

    When every rank agrees and none has an error (one all_reduce says so), where every rank runs is
    gathered to rank 0 alone, or to every rank where --group intra or inter, or a node sweep, forms
    groups from it.
    """
    if _alike(backend, cfg, error):
        return _facts(backend, cfg, ranks_error)
    return _agree_in_full(backend, cfg, error, ranks_error)


def _digest(cfg: SweepConfig) -> float:
    """The option digests, hashed, as a float64 that holds its 52 low bits exactly."""
    text = json.dumps(cfg.option_digests(), sort_keys=True).encode()
    return float(int.from_bytes(hashlib.sha1(text).digest()[:8], "big") & ((1 << 52) - 1))


def _alike(backend: Backend, cfg: SweepConfig, error: str | None) -> bool:
    """True when every rank has rank 0's digest and no rank has an error: the max over ranks of the
    digest and of its negation (minus the min) are both this rank's own only when all are equal."""
    digest = _digest(cfg)
    top, bottom, errors = backend.reduce_floats([digest, -digest, 1.0 if error else 0.0], "max")
    return top == digest and -bottom == digest and errors == 0.0


def _facts(backend: Backend, cfg: SweepConfig, ranks_error: Callable[[int], str | None] | None) -> RunFacts:
    """Run facts once the ranks agree: every rank's node gathered where it is needed, the checks that
    depend on the hosts, and rank 0's run id."""
    run_id = _shared_run_id(backend)
    node = backend.node_info()
    # Under --group world the sweep's groups need no hosts: rank 0 alone writes them into its rows.
    # Another rank program (isolate's node sweep) pairs hosts on every rank.
    if cfg.group == "world" and cfg.program == SWEEP_PROGRAM:
        nodes = backend.gather_object(node)
        message = ranks_error(backend.world_size) if ranks_error is not None else None
    else:
        nodes = backend.all_gather_object(node)
        hosts = [n["host"] for n in nodes]
        message = _group_error(cfg, hosts, ranks_error)
    if message is not None:
        if backend.rank == 0:
            raise UserError(message)
        raise PeerError(message)
    if nodes is None:  # not rank 0, under --group world
        return RunFacts(run_id=run_id, hosts="", node_ranks="", rank_hosts=())
    return _run_facts(run_id, nodes)


def _shared_run_id(backend: Backend) -> str:
    """Rank 0's random run id (48 bits, as 12 hex digits) on every rank, through one all_reduce."""
    (drawn,) = backend.reduce_floats([float(secrets.randbits(48)) if backend.rank == 0 else 0.0], "max")
    return f"{int(drawn):012x}"


def _group_error(cfg: SweepConfig, hosts: list[str], ranks_error: Callable[[int], str | None] | None) -> str | None:
    """A --group these hosts cannot form, or an option the ops cannot use on each group's ranks."""
    message = refusal(cfg.group, hosts)
    if message is None and ranks_error is not None:
        message = ranks_error(len(rank_groups(cfg.group, hosts)[0]))
        if message is not None and cfg.group != "world":
            message += f" (under --group {cfg.group}, ranks count within each group)"
    return message


def _agree_in_full(
    backend: Backend, cfg: SweepConfig, error: str | None, ranks_error: Callable[[int], str | None] | None
) -> RunFacts:
    """Every rank's option digests, error and node on every rank: what differs, and who found what."""
    mine = {
        "digests": cfg.option_digests(),
        "error": error,
        "node": backend.node_info(),
        "run_id": uuid.uuid4().hex[:12],
    }
    everyone = backend.all_gather_object(mine)
    hosts = [e["node"]["host"] for e in everyone]
    message = _inconsistent(everyone) or _group_error(cfg, hosts, ranks_error)
    if message is not None:
        if backend.rank == 0:  # one report, not one per rank
            raise UserError(message)
        raise PeerError(message)
    _raise_first(backend.rank, [(e["node"]["rank"], e["error"]) for e in everyone if e["error"]])
    return _run_facts(everyone[0]["run_id"], [e["node"] for e in everyone])


def _run_facts(run_id: str, nodes: list[dict[str, Any]]) -> RunFacts:
    """The run facts from every rank's node_info(), by rank."""
    hosts = [n["host"] for n in nodes]
    # Where the launcher does not number the nodes (mpirun over several hosts), hosts are numbered in rank order.
    numbered = {host: i for i, host in enumerate(dict.fromkeys(hosts))}
    places = [f"{n['host']}/{numbered[n['host']] if n['node_rank'] is None else n['node_rank']}" for n in nodes]
    return RunFacts(
        run_id=run_id,
        hosts=";".join(sorted(numbered)),
        node_ranks=node_ranks([n["rank"] for n in nodes], places),
        rank_hosts=tuple(hosts),
    )


def share_refusal(backend: Backend, error: str | None) -> None:
    """Every rank learns whether any rank refused to go on (rank 0 could not create its output after
    all: another run took the name since it was checked); the rank that refused raises a UserError
    with its message, the others a quiet PeerError, so no peer is left to fail in a collective.
    One all_reduce of a flag when no rank refused (every run); the messages are gathered only when one did."""
    (refused,) = backend.reduce_floats([1.0 if error else 0.0], "max")
    if not refused:
        return
    everyone = backend.all_gather_object((backend.rank, error))
    _raise_first(backend.rank, [(rank, message) for rank, message in everyone if message])


def _raise_first(me: int, errors: list[tuple[int, str]]) -> None:
    """The first (rank, message) refusal: a UserError on the rank that found it, a PeerError elsewhere."""
    if errors:
        rank, message = errors[0]
        if rank == me:
            raise UserError(message)
        raise PeerError(message, rank)


def node_ranks(ranks: list[int], places: list[str]) -> str:
    """Where every rank runs, as `rank@host/node_rank`, `;`-separated, consecutive ranks on one place
    as one `first-last@host/node_rank`: every row carries this, so it grows with the hosts, not the ranks."""
    runs: list[list[Any]] = []  # [first, last, place]
    for rank, place in zip(ranks, places):
        if runs and runs[-1][2] == place and runs[-1][1] == rank - 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank, place])
    return ";".join(f"{first}{'' if first == last else f'-{last}'}@{place}" for first, last, place in runs)


def _inconsistent(everyone: list[dict[str, Any]]) -> str | None:
    """Which options differ from rank 0's, and on which ranks; None when every rank agrees."""
    reference = everyone[0]["digests"]
    odd: dict[str, list[int]] = {}
    for other in everyone[1:]:
        for option, digest in reference.items():
            if other["digests"].get(option) != digest:
                odd.setdefault(option, []).append(other["node"]["rank"])
    if not odd:
        return None
    differs = "; ".join(
        f"{option} differs between rank 0 and rank{'s' if len(ranks) > 1 else ''} "
        f"{', '.join(map(str, ranks[:8]))}{' ...' if len(ranks) > 8 else ''}"
        for option, ranks in odd.items()
    )
    return f"ranks were launched with different options: {differs}; launch every rank with the same command"
