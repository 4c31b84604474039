"""Where every rank is, kept in the rendezvous store, so a failure names the rank at fault.

A rank that times out or sees a collective fail only knows its own side: "I waited in all_gather at
4 MB". The peer at fault is the one that died or never issued that collective. Each rank therefore
publishes a small record (heartbeat counter, collectives issued so far, the step it is in, its
state) from a background thread once per interval, and once at the start of every case; the
failing rank reads every record twice, a few intervals apart, and names the ranks whose heartbeat
stopped (gone) or that issued fewer collectives than the rest (behind, i.e. hung before the call).

The timed loop never touches the store: the thread only reads two plain attributes the loop keeps
anyway (the watchdog's label and the backend's call counter, one integer increment per call).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from commbench.launchers import Launch


class Store(Protocol):
    """The part of torch.distributed.Store used here (TCPStore, PrefixStore, FileStore)."""

    def set(self, key: str, value: str) -> None: ...
    def get(self, key: str) -> bytes: ...
    def check(self, keys: list[str]) -> bool: ...


RUNNING = "running"


def store_prefix(attempt: int | str = 0) -> str:
    """The key namespace of one launch attempt (torchrun may restart workers on the same store)."""
    return f"commbench/{attempt}/progress"


def connect_store(launch: Launch, timeout_s: float) -> Any:
    """A client of the rendezvous store (torchrun's agent's, or the one commbench's spawner hosts),
    or None where the launch has none (horovodrun).

    Its own connection, so a heartbeat never queues behind the process group's store traffic; keys
    are namespaced per torchrun restart attempt, as the agent keeps one store across them.
    """
    if not (launch.master_addr and launch.master_port) or (launch.kind == "horovodrun" and not launch.spawned):
        return None
    import torch.distributed as dist

    client = dist.TCPStore(
        launch.master_addr, launch.master_port, None, False, timeout=datetime.timedelta(seconds=timeout_s)
    )
    return dist.PrefixStore(store_prefix(launch.attempt), client)


@dataclass
class RankRecord:
    """One rank's published state."""

    beat: int
    issued: int
    label: str
    state: str = RUNNING


def read_record(store: Store, rank: int) -> RankRecord | None:
    """The rank's last record, or None when it never published one (check() does not block)."""
    key = str(rank)
    if not store.check([key]):
        return None
    return RankRecord(**json.loads(store.get(key)))


class ProgressBoard:
    """Publishes this rank's record in the background; diagnose() names the peers at fault."""

    def __init__(
        self,
        store: Store | None,
        rank: int,
        world_size: int,
        interval_s: float,
        local: Callable[[], tuple[int, str]],
        stale_s: float | None = None,
    ) -> None:
        self.store = store
        self.rank = rank
        self.world_size = world_size
        self.interval_s = interval_s
        # A heartbeat is due every interval; a few missed ones, with slack for a loaded machine, is gone.
        self.stale_s = max(2.0, 3 * interval_s) + 0.5 if stale_s is None else stale_s
        self.local = local  # () -> (collectives issued, current step label)
        self.beat = 0
        self.state = RUNNING
        self._lock = threading.Lock()  # one store request at a time from this object
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.store is None:
            return
        self._publish()
        self._thread = threading.Thread(target=self._run, name="commbench-heartbeat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._publish()
            except Exception:
                # A transient store error must not silence this rank for good (its peers would later
                # call it gone); if the store itself is gone, the readers' diagnosis says so.
                continue

    def step(self, label: str) -> None:
        """Publish now, at the start of a case (outside timing), so a record is never a case behind."""
        if self.store is not None and not self._stop.is_set():
            with contextlib.suppress(Exception):
                self._publish(label)

    def _publish(self, label: str | None = None) -> None:
        issued, current = self.local()
        label = current if label is None else label
        self.beat += 1
        record = RankRecord(self.beat, issued, label, self.state)
        with self._lock:
            self.store.set(str(self.rank), json.dumps(asdict(record)))

    def finish(self, state: str) -> None:
        """Publish a final state ("finished", "failed in ...") and stop the heartbeat; the first call wins."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self.store is None:
            return
        if self._thread is not None:  # so a late heartbeat cannot overwrite the final state
            self._thread.join(timeout=self.interval_s + 1)
        self.state = state
        with contextlib.suppress(Exception):
            self._publish()

    def _read_all(self) -> dict[int, RankRecord | None]:
        with self._lock:
            return {r: read_record(self.store, r) for r in range(self.world_size) if r != self.rank}

    def diagnose(self, wait: Callable[[float], None] = time.sleep) -> str:
        """Name the ranks that are gone, finished or behind; '' when the store cannot tell.

        Records are read twice, `wait(stale_s)` apart: a rank whose heartbeat did not move is gone.
        """
        if self.store is None:
            return ""
        first = self._read_all()
        wait(self.stale_s)
        second = self._read_all()
        issued, label = self.local()
        findings: list[str] = []
        # Ranks whose call count is current: this one, the beating ones and the ones that stopped.
        counted: dict[int, tuple[int, str]] = {self.rank: (issued, label)}
        for rank, rec in second.items():
            before = first.get(rank)
            if rec is None:
                findings.append(f"rank {rank} never reported (it did not start or died before the first collective)")
            elif rec.state != RUNNING:
                findings.append(f"rank {rank} has stopped ({rec.state})")
                counted[rank] = (rec.issued, rec.label)  # where it stopped still tells who fell behind
            elif before is not None and before.beat == rec.beat:
                where = f"in {rec.label}" if rec.label else "before its first step"
                findings.append(f"rank {rank} is gone (no heartbeat for {self.stale_s:.1f}s; last seen {where})")
            else:
                counted[rank] = (rec.issued, rec.label)
        most = max(n for n, _ in counted.values())
        behind = sorted(r for r, (n, _) in counted.items() if n < most)
        for rank in behind:
            n, where = counted[rank]
            who = "this rank" if rank == self.rank else f"rank {rank}"
            findings.append(
                f"{who} is behind: it issued {n} collectives, the others {most}, "
                f"so it never issued the one they wait in (it is in {where})"
            )
        if not findings:
            return "every rank is alive and issued the same collectives (a transport stall, not a missing rank)"
        return "; ".join(findings)
