"""Where every rank is, kept in the rendezvous store, so a failure names the rank at fault.

A rank that times out or sees a collective fail only knows its own side: "I waited in all_gather at
4 MB". The peer at fault is the one that died or never issued that collective. Each rank therefore
publishes a small record (heartbeat counter, collectives issued so far, the step it is in, its
state) from a background thread once per interval, and soon after the start of every case; one
failing rank reads every record twice, a few intervals apart, names the ranks whose heartbeat
stopped (gone) or that issued fewer collectives than the rest (behind, i.e. hung before the call),
and leaves that diagnosis in the store for every other failing rank to read.

The one store serves every rank, so its load is bounded by design (docs/scale.md): a rank writes at
most once per world_size / STORE_WRITES_PER_S seconds, so all of them together write at most
STORE_WRITES_PER_S records a second at any world size, and a failure costs the store two reads
of every record (by the one diagnosing rank) plus one read per other rank, not a world of reads
per rank.

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
    from commbench.backends.job import Launch


class Store(Protocol):
    """The part of torch.distributed.Store used here (TCPStore, PrefixStore, FileStore)."""

    def set(self, key: str, value: str) -> None: ...
    def get(self, key: str) -> bytes: ...
    def check(self, keys: list[str]) -> bool: ...
    def add(self, key: str, amount: int) -> int: ...


RUNNING = "running"

# The heartbeat's share of the rendezvous store, in writes per second summed over every rank. One
# TCPStore server (a single thread serving every connection) answers tens of thousands of small
# requests a second (bench/scale.py measures it); this leaves it nearly all of that for rendezvous.
STORE_WRITES_PER_S = 200
# Keys of the shared diagnosis: the counter that elects the one rank that reads every record, and
# the diagnosis it leaves for the others.
DIAGNOSING_KEY, DIAGNOSIS_KEY = "diagnosing", "diagnosis"
# The diagnosis when no rank is gone, finished or behind; the caller says what failed (because()).
ALL_ALIVE = "every rank is alive and issued the same collectives"
# Time allowed per record read by the diagnosing rank (two requests each, twice), on a loaded store.
READ_S_PER_RANK = 0.004
# How often a rank waiting for the shared diagnosis looks for it, at least: a large world looks
# once per heartbeat gap, so the waiting ranks together stay within the store's budget too.
DIAGNOSIS_POLL_S = 0.1


def heartbeat_gap_s(world_size: int) -> float:
    """The least time between two records of one rank: every rank together writes at most
    STORE_WRITES_PER_S records a second."""
    return world_size / STORE_WRITES_PER_S


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


class Heartbeat:
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
        # interval_s is the wanted interval; a large world stretches it to the rank's share of the store.
        self.gap_s = heartbeat_gap_s(world_size)
        self.interval_s = max(interval_s, self.gap_s)
        # A heartbeat is due every interval; a few missed ones, with slack for a loaded machine, is gone.
        self.stale_s = max(2.0, 3 * self.interval_s) + 0.5 if stale_s is None else stale_s
        # How long a diagnosis may take: the wait between its two reads, the reads, and slack.
        self.poll_s = max(DIAGNOSIS_POLL_S, self.gap_s)
        self.diagnosis_s = max(4 * self.interval_s, self.stale_s + 2 * READ_S_PER_RANK * world_size + self.poll_s) + 5
        self.local = local  # () -> (collectives issued, current step label)
        self.beat = 0
        self.state = RUNNING
        self._step_label: str | None = None  # a case just started: the next record names it
        self._lock = threading.Lock()  # one store request at a time from this object
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.store is None:
            return
        self._publish()
        self._thread = threading.Thread(target=self._run, name="commbench-heartbeat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self._wake.wait(self.interval_s)  # the interval, or a case that started
            self._wake.clear()
            if self._stop.is_set():
                return
            # A transient store error must not silence this rank for good (its peers would later
            # call it gone); if the store itself is gone, the readers' diagnosis says so.
            with contextlib.suppress(Exception):
                self._publish()
            if self._stop.wait(self.gap_s):  # never more often than this rank's share of the store
                return

    def step(self, label: str) -> None:
        """A case starts (outside timing): the heartbeat thread publishes its label as soon as this
        rank's share of the store allows (at once in a small world), so a record is never a case behind
        for long, and the main thread never waits on the store."""
        self._step_label = label
        self._wake.set()

    def _publish(self, label: str | None = None) -> None:
        issued, current = self.local()
        step, self._step_label = self._step_label, None
        label = label or step or current
        self.beat += 1
        record = RankRecord(self.beat, issued, label, self.state)
        with self._lock:
            self.store.set(str(self.rank), json.dumps(asdict(record)))

    def finish(self, state: str) -> None:
        """Publish a final state ("finished", "failed in ...") and stop the heartbeat; the first call wins."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._wake.set()
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
        """Name the ranks that are gone, finished or behind (ALL_ALIVE when none is); '' when the store cannot tell.

        The first rank to ask reads every record and leaves its diagnosis in the store; the others
        (every rank of a hung collective times out alike) look for it every poll_s and read that
        one key. They poll rather than block in the store's wait(): that would hold the connection
        the heartbeat shares, and the diagnosing rank would find this rank's heartbeat stopped.
        """
        if self.store is None:
            return ""
        with self._lock:
            elected = self.store.add(DIAGNOSING_KEY, 1) == 1
        if not elected:
            deadline = time.monotonic() + self.diagnosis_s
            while time.monotonic() < deadline:
                with self._lock:
                    if self.store.check([DIAGNOSIS_KEY]):
                        return self.store.get(DIAGNOSIS_KEY).decode()
                wait(self.poll_s)
            return f"(no diagnosis: the rank diagnosing for every rank gave none within {self.diagnosis_s:.0f}s)"
        found = self._diagnose_all(wait)
        with self._lock:
            self.store.set(DIAGNOSIS_KEY, found)
        return found

    def _diagnose_all(self, wait: Callable[[float], None]) -> str:
        """Every record read twice, `wait(stale_s)` apart: a rank whose heartbeat did not move is gone."""
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
        for rank in behind:  # named by number: the other ranks read this diagnosis too
            n, where = counted[rank]
            findings.append(
                f"rank {rank} is behind: it issued {n} collectives, the others {most}, "
                f"so it never issued the one they wait in (it is in {where})"
            )
        if not findings:
            return ALL_ALIVE
        return "; ".join(findings)


def because(detail: str, cause: str) -> str:
    """The diagnosis with what failed where no rank is at fault: the ranks all issued the call, so the
    cause is the transport's (a stall where they timed out, its refusal or error where it raised)."""
    return f"{detail} ({cause}, not a missing rank)" if detail == ALL_ALIVE else detail
