"""Real process groups for tests: run a function on every rank of a fresh Gloo group of N processes."""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import socket
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(fn: Callable[..., Any], backend_name: str, rank: int, world: int, port: int, out: Any, args: tuple) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")  # fmt: skip
    from commbench.backends import load_backend

    backend = load_backend(backend_name)()
    try:
        backend.init(60)
        out.put((rank, True, fn(backend, *args)))
    except BaseException:
        out.put((rank, False, traceback.format_exc()))
    finally:
        backend.close()


def _context() -> mp.context.BaseContext:
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch.distributed", "commbench.harness", "commbench.backends.gloo"])
    return ctx


def run_ranks(fn: Callable[..., Any], world_size: int, *args: Any, backend: str = "gloo", timeout: float = 120) -> list[Any]:
    """fn(backend, *args) on every rank of a real process group; returns the results by rank.

    fn must be a module-level function (it is pickled into the ranks). Ranks fork from a
    forkserver that has imported torch but never computed with it: forking the pytest process
    itself could inherit a busy OpenMP pool from an earlier test and hang.
    """
    ctx = _context()
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(fn, backend, r, world_size, port, out, args)) for r in range(world_size)]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    errors: list[str] = []
    try:
        for _ in procs:
            rank, ok, value = out.get(timeout=timeout)
            (results.__setitem__(rank, value) if ok else errors.append(f"rank {rank}:\n{value}"))
    except queue.Empty:
        errors.append(f"timed out after {timeout}s; ranks that answered: {sorted(results)}")
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    if errors:
        raise AssertionError("\n".join(errors))
    return [results[r] for r in range(world_size)]


def commbench(*args: str, timeout: float = 300, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real `python -m commbench ...` in a subprocess and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "commbench", *args], capture_output=True, text=True, timeout=timeout,
        env={**os.environ, **(env or {})}, cwd=cwd or REPO,
    )  # fmt: skip


def torchrun(nproc: int, *args: str, timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`torchrun --standalone --nproc_per_node=N -m commbench ...` on loopback."""
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", "--nnodes=1",
         "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}", "-m", "commbench", *args],
        capture_output=True, text=True, timeout=timeout, cwd=cwd or REPO,
        env={**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
