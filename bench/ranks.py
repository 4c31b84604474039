"""What the bench scripts share: start N local Gloo ranks, and join one of them to the group.

Ranks are pinned one per core and run one intra-op thread (as commbench's spawner does), so two
loops measured side by side in the same processes see the same machine.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
from collections.abc import Callable
from typing import Any


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
    from commbench.launchers import detect

    torch.set_num_threads(1)  # as commbench's spawner does: the ranks share the cores
    if hasattr(os, "sched_setaffinity"):  # one core per rank: fewer migrations, less noise for both loops
        os.sched_setaffinity(0, {rank % (os.cpu_count() or 1)})
    joined = load_backend(backend)()
    joined.init(300, detect())
    return joined


def run_ranks(target: Callable[..., Any], ranks: int, *args: Any) -> Any:
    """target(rank, world, port, queue, *args) in `ranks` fresh processes; returns what rank 0 puts on the queue."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=target, args=(r, ranks, port, queue, *args)) for r in range(ranks)]
    for p in procs:
        p.start()
    result = queue.get()
    for p in procs:
        p.join()
    return result


def arguments(doc: str | None) -> argparse.ArgumentParser:
    """A bench script's parser with the options every script takes: --ranks, --rounds, --iters."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--iters", type=int, default=20)
    return parser
