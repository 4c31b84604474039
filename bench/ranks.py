"""What the bench scripts share: start N local Gloo ranks, and join one of them to the group.

Ranks are pinned one per core and run one intra-op thread (as commbench's spawner does), so two
loops measured side by side in the same processes see the same machine.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue as queues
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

# Seconds a bench script waits for its ranks' next result before it stops them and says so.
RESULT_TIMEOUT_S = 900.0


class RanksFailed(RuntimeError):
    """A rank exited with an error, or sent nothing in time: the ranks are stopped, the reason given."""


def join_group(rank: int, world: int, port: int, backend: str = "gloo") -> Any:
    """This process as rank `rank` of a group on loopback (all ranks on this host); returns its backend."""
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        GLOO_SOCKET_IFNAME="lo",
        NCCL_SOCKET_IFNAME="lo",
    )
    import torch

    from commbench.backends import load_backend
    from commbench.launch.env import detect

    torch.set_num_threads(1)  # as commbench's spawner does: the ranks share the cores
    if hasattr(os, "sched_setaffinity"):  # one core per rank: fewer migrations, less noise for both loops
        os.sched_setaffinity(0, {rank % (os.cpu_count() or 1)})
    joined = load_backend(backend)()
    joined.init(300, detect())
    return joined


def run_ranks(target: Callable[..., Any], ranks: int, *args: Any, timeout_s: float = RESULT_TIMEOUT_S) -> Any:
    """target(rank, world, port, queue, *args) in `ranks` fresh processes; returns what rank 0 puts on the queue."""
    return next(stream_ranks(target, ranks, *args, items=1, timeout_s=timeout_s))


def stream_ranks(
    target: Callable[..., Any], ranks: int, *args: Any, items: int, timeout_s: float = RESULT_TIMEOUT_S
) -> Iterator[Any]:
    """target(rank, world, port, queue, *args) in `ranks` fresh processes; yields the `items` results
    rank 0 puts on the queue, each as it arrives. A rank that exits with an error, or no result within
    timeout_s, stops every rank and raises RanksFailed (a crashed rank never hangs the script)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=target, args=(r, ranks, port, queue, *args)) for r in range(ranks)]
    for p in procs:
        p.start()
    try:
        for _ in range(items):
            yield _next_result(queue, procs, timeout_s)
        for p in procs:
            p.join(timeout=60)
        _raise_if_failed(procs, "after sending its results")
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()


def _next_result(queue: Any, procs: list[Any], timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return queue.get(timeout=1.0)
        except queues.Empty:
            _raise_if_failed(procs, "before sending a result")
            if all(p.exitcode is not None for p in procs):
                raise RanksFailed("every rank exited without sending its result") from None
    raise RanksFailed(f"no result from the ranks within {timeout_s:.0f} s: stopped them")


def _raise_if_failed(procs: list[Any], when: str) -> None:
    for rank, p in enumerate(procs):
        if p.exitcode not in (None, 0):
            raise RanksFailed(f"rank {rank} exited with code {p.exitcode} {when} (its error is above)")


def arguments(doc: str | None) -> argparse.ArgumentParser:
    """A bench script's parser with the options every script takes: --ranks, --rounds, --iters."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--iters", type=int, default=20)
    return parser
