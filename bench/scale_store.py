"""The rendezvous store under 1,024 to 8,192 simulated ranks: what commbench's heartbeat costs it.

One real TCPStore server, hosted as `commbench sweep` hosts it (commbench.launch.start.host_store),
and N simulated ranks: --procs client processes, each holding N / procs store connections and
driving them from a few threads. Each simulated rank does what a rank does to the store:

1. rendezvous: count itself in (add), publish its address (set), read rank 0's (get), then wait
   until every rank has counted itself in (wait), as a store-based barrier does;
2. heartbeats: one progress record (set) per interval, at a phase of its own;
3. a diagnosis, as after a hung collective every rank's watchdog fires at once.

Each world size gets a fresh server; its connections are made once (and their time reported),
then two heartbeat policies run on them, one after the other:
- bounded (commbench now): the interval a Heartbeat takes at this world size
  (commbench.run.heartbeat.heartbeat_gap_s, i.e. world / STORE_WRITES_PER_S seconds, at least the
  watchdog's 1 s), every record published at the gap (the most case starts can add); a diagnosis
  elects one rank (add) that reads every record twice (check + get) and leaves the result
  (set); the others look for that key (check, every Heartbeat.poll_s) and read it (get).
- per-second (commbench before): one record per rank per second; every rank reads every record
  for its diagnosis. O(world^2) reads cannot be simulated at 8,192 ranks on one host, so
  --old-readers ranks read every record and the total is projected (labelled).

Reported per world size and policy: the store's request rate during the heartbeat phase (requests
completed / phase seconds, against the rate the policy asks for), request latency p50 / p99 per
phase, and errors. The clients share the host's cores with the server: latencies are upper bounds
of what a dedicated store host would see.

    python bench/scale_store.py [--worlds 1024 4096 8192] [--procs 4] [--threads 8]
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import os
import resource
import threading
import time
from collections import defaultdict
from typing import Any

RDZV_TIMEOUT_S = 300.0


def _raise_fd_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Recorder:
    """Per-phase request latencies (seconds) and errors of one client process."""

    def __init__(self) -> None:
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.errors: dict[str, int] = defaultdict(int)
        self.lock = threading.Lock()

    def call(self, phase: str, fn: Any, *args: Any) -> Any:
        start = time.perf_counter()
        try:
            result = fn(*args)
        except Exception:
            with self.lock:
                self.errors[phase] += 1
            return None
        elapsed = time.perf_counter() - start
        with self.lock:
            self.latency[phase].append(elapsed)
        return result


def _split(items: list[Any], parts: int) -> list[list[Any]]:
    return [items[i::parts] for i in range(parts)]


def _threads(target: Any, slices: list[list[Any]]) -> None:
    threads = [threading.Thread(target=target, args=(s,)) for s in slices if s]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def client_main(
    proc: int,
    port: int,
    ranks: list[int],
    world: int,
    policies: list[dict[str, Any]],
    threads: int,
    sync: Any,
    queue: Any,
) -> None:
    """Connect ranks' clients once, then run each policy's rendezvous, heartbeats and diagnosis in
    step with the other client processes (sync: a barrier across them); one result per policy."""
    import torch.distributed as dist

    _raise_fd_limit()
    connecting = Recorder()
    timeout = datetime.timedelta(seconds=RDZV_TIMEOUT_S)
    stores: dict[int, Any] = {}

    def connect(mine: list[int]) -> None:
        for r in mine:
            client = connecting.call("connect", dist.TCPStore, "127.0.0.1", port, None, False, timeout)
            if client is not None:
                stores[r] = client

    _threads(connect, _split(ranks, threads))
    queue.put((proc, "connect", dict(connecting.latency), dict(connecting.errors), 0.0, 0.0))
    for policy in policies:
        sync.wait()
        rec, rdzv_s, diag_s = one_policy(stores, ranks, world, policy, threads, sync, timeout)
        queue.put((proc, policy["name"], dict(rec.latency), dict(rec.errors), rdzv_s, diag_s))
    sync.wait()


def one_policy(
    stores: dict[int, Any],
    ranks: list[int],
    world: int,
    policy: dict[str, Any],
    threads: int,
    sync: Any,
    timeout: datetime.timedelta,
) -> tuple[Recorder, float, float]:
    """Rendezvous, heartbeats and a diagnosis of this process's ranks under one policy."""
    from commbench.benchkit import DIAGNOSING_KEY, DIAGNOSIS_KEY, RankRecord, store_prefix

    rec = Recorder()
    tag = policy["name"]

    # 1. rendezvous
    def rendezvous(mine: list[int]) -> None:
        for r in mine:
            s = stores[r]
            if rec.call("rendezvous", s.add, f"{tag}/rdzv/arrived", 1) == world:
                rec.call("rendezvous", s.set, f"{tag}/rdzv/go", "1")
            rec.call("rendezvous", s.set, f"{tag}/rdzv/addr/{r}", f"127.0.0.1:{20000 + r}")
        for r in mine:
            s = stores[r]
            rec.call("rendezvous", s.wait, [f"{tag}/rdzv/addr/0"], timeout)
            rec.call("rendezvous", s.get, f"{tag}/rdzv/addr/0")
            rec.call("rendezvous", s.wait, [f"{tag}/rdzv/go"], timeout)

    t0 = time.perf_counter()
    _threads(rendezvous, _split(ranks, threads))
    rdzv_s = time.perf_counter() - t0
    sync.wait()

    # 2. heartbeats: rank r beats at start + phase_r + k * interval, phase_r spread over the interval
    prefix = f"{store_prefix(tag)}/"
    interval, duration = policy["interval_s"], policy["duration_s"]
    start = time.monotonic() + 0.5

    def beat(mine: list[int]) -> None:
        due = sorted((start + (r % 997) / 997 * interval, r, 0) for r in mine)
        while due:
            when, r, k = due.pop(0)
            if when > start + duration:
                continue
            time.sleep(max(0.0, when - time.monotonic()))
            record = RankRecord(beat=k + 1, issued=1000 + k, label="all_gather/flat/comm float32 at 4096 bytes")
            rec.call("heartbeat", stores[r].set, f"{prefix}{r}", json.dumps(record.__dict__))
            nxt = (when + interval, r, k + 1)
            lo = next((i for i, d in enumerate(due) if d > nxt), len(due))
            due.insert(lo, nxt)

    _threads(beat, _split(ranks, threads))
    sync.wait()

    # 3. the diagnosis every rank asks for when a collective hangs
    def read_all(s: Any) -> None:
        for other in range(world):
            if rec.call("diagnosis", s.check, [f"{prefix}{other}"]):
                rec.call("diagnosis", s.get, f"{prefix}{other}")

    t0 = time.perf_counter()
    if policy["shared_diagnosis"]:

        def diagnose(mine: list[int]) -> None:
            for r in mine:
                s = stores[r]
                if rec.call("diagnosis", s.add, f"{prefix}{DIAGNOSING_KEY}", 1) == 1:
                    read_all(s)
                    read_all(s)
                    rec.call("diagnosis", s.set, f"{prefix}{DIAGNOSIS_KEY}", "rank 7 is behind")
                else:
                    while not rec.call("diagnosis", s.check, [f"{prefix}{DIAGNOSIS_KEY}"]):
                        time.sleep(policy["poll_s"])
                    rec.call("diagnosis", s.get, f"{prefix}{DIAGNOSIS_KEY}")

        _threads(diagnose, _split(ranks, threads))
    else:
        readers = [r for r in ranks if r < policy["old_readers"]]
        _threads(lambda mine: [read_all(stores[r]) for r in mine], _split(readers, threads))
    return rec, rdzv_s, time.perf_counter() - t0


def run(world: int, policies: list[dict[str, Any]], procs: int, threads: int) -> dict[str, dict[str, Any]]:
    """One world size on a fresh store server: its connections, then each policy in turn."""
    from commbench.benchkit import host_store

    _raise_fd_limit()
    store, port = host_store(RDZV_TIMEOUT_S)
    ctx = mp.get_context("spawn")
    sync = ctx.Barrier(procs)
    queue = ctx.Queue()
    slices = _split(list(range(world)), procs)
    children = [
        ctx.Process(target=client_main, args=(p, port, slices[p], world, policies, threads, sync, queue))
        for p in range(procs)
    ]
    started = time.perf_counter()
    for c in children:
        c.start()
    results = [queue.get() for _ in range(procs * (1 + len(policies)))]
    for c in children:
        c.join()
    del store
    found: dict[str, dict[str, Any]] = {}
    for name in ["connect", *(p["name"] for p in policies)]:
        mine = [r for r in results if r[1] == name]
        latency: dict[str, list[float]] = defaultdict(list)
        errors: dict[str, int] = defaultdict(int)
        for _, _, lat, err, _, _ in mine:
            for phase, values in lat.items():
                latency[phase] += values
            for phase, n in err.items():
                errors[phase] += n
        found[name] = {
            "latency": latency,
            "errors": errors,
            "rdzv_s": max(r[4] for r in mine),
            "diag_s": max(r[5] for r in mine),
        }
    found["connect"]["wall_s"] = time.perf_counter() - started
    return found


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1e3 if ordered else float("nan")


def main() -> None:
    from commbench.benchkit import DIAGNOSIS_POLL_S, READ_S_PER_RANK, heartbeat_gap_s

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worlds", type=int, nargs="+", default=[1024, 4096, 8192])
    parser.add_argument("--procs", type=int, default=4, help="client processes")
    parser.add_argument("--threads", type=int, default=8, help="threads per client process")
    parser.add_argument("--old-seconds", type=float, default=10.0, help="heartbeat phase of the per-second policy")
    parser.add_argument("--old-readers", type=int, default=4, help="ranks that diagnose under the old policy")
    args = parser.parse_args()
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # no warning per client connection
    print(
        f"{'ranks':>6} {'policy':>10} {'interval':>8} {'asked/s':>8} {'done/s':>8} {'hb p50':>7} {'hb p99':>7} "
        f"{'rdzv p99':>8} {'rdzv s':>6} {'diag reqs':>10} {'diag p99':>8} {'diag s':>7} {'errors':>6}  (ms)"
    )
    for world in args.worlds:
        bounded = {
            "name": "bounded",
            "interval_s": max(1.0, heartbeat_gap_s(world)),
            "shared_diagnosis": True,
            "old_readers": 0,
            "poll_s": max(DIAGNOSIS_POLL_S, heartbeat_gap_s(world)),
        }
        bounded["duration_s"] = max(10.0, 1.25 * bounded["interval_s"])
        old = {
            "name": "per-second",
            "interval_s": 1.0,
            "duration_s": args.old_seconds,
            "shared_diagnosis": False,
            "old_readers": args.old_readers,
        }
        out = run(world, [bounded, old], args.procs, args.threads)
        connect = out["connect"]["latency"].get("connect", [])
        print(
            f"# {world} ranks: {len(connect)} connections, {sum(out['connect']['errors'].values())} errors, "
            f"p50 {_pct(connect, 50):.0f} ms, p99 {_pct(connect, 99):.0f} ms each (whole run {out['connect']['wall_s']:.0f} s)",
            flush=True,
        )
        for policy in (bounded, old):
            found = out[policy["name"]]
            lat = found["latency"]
            hb = lat.get("heartbeat", [])
            diag = lat.get("diagnosis", [])
            diag_reqs, diag_note = len(diag), ""
            if not policy["shared_diagnosis"]:  # every rank reads every record: projected from a few
                per_reader = len(diag) / max(1, min(args.old_readers, world))
                diag_reqs = int(per_reader * world)
                diag_note = f" projected from {args.old_readers} readers"
            errors = sum(found["errors"].values())
            print(
                f"{world:>6} {policy['name']:>10} {policy['interval_s']:>7.2f}s {world / policy['interval_s']:>8.0f} "
                f"{len(hb) / policy['duration_s']:>8.0f} {_pct(hb, 50):>7.2f} {_pct(hb, 99):>7.2f} "
                f"{_pct(lat.get('rendezvous', []), 99):>8.2f} {found['rdzv_s']:>6.1f} {diag_reqs:>10} "
                f"{_pct(diag, 99):>8.2f} {found['diag_s']:>7.1f} {errors:>6}{diag_note}",
                flush=True,
            )
    print(
        f"# diagnosis (bounded): the elected rank's reads take about {READ_S_PER_RANK * 1e3:g} ms per rank in "
        "Heartbeat.diagnosis_s; the wait between its two reads is not simulated"
    )


if __name__ == "__main__":
    main()
