"""Gloo ranks for the bench scripts: fresh spawned processes that join one group over loopback."""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
from collections.abc import Callable
from typing import Any


def _rank(rank: int, world: int, port: int, target: Callable[..., Any], args: tuple, queue: Any) -> None:
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        GLOO_SOCKET_IFNAME="lo",
    )
    import torch

    from commbench.backends.gloo import GlooBackend
    from commbench.launchers import detect

    torch.set_num_threads(1)  # as commbench's spawner does: the ranks share the cores
    backend = GlooBackend()
    backend.init(900, detect())
    try:
        queue.put((rank, target(backend, *args)))
    finally:
        backend.close()


def run(target: Callable[..., Any], world: int, *args: Any) -> list[Any]:
    """target(backend, *args) on every rank of a fresh Gloo group of `world` processes; results by rank.

    target must be a module-level function of the calling script (it is pickled into the ranks).
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, world, port, target, args, queue)) for r in range(world)]
    for p in procs:
        p.start()
    results = dict(queue.get() for _ in procs)
    for p in procs:
        p.join()
    return [results[r] for r in range(world)]
