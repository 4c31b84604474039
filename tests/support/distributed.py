"""Real process groups for tests: run a function on every rank of a fresh Gloo group of N processes."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def rendezvous_store(timeout_s: float = 300) -> Iterator[int]:
    """A TCPStore this process hosts on 127.0.0.1 for as long as the block runs; yields its port.

    The port is bound before anyone learns it, so no other process can take it in between (a
    "free port" found by binding and closing a socket can be), and ranks join as clients
    (TORCHELASTIC_USE_AGENT_STORE, as torchrun's workers do). torchrun's c10d rendezvous, pointed at
    it, finds the port taken and joins as a client too.
    """
    from commbench.launch.start import host_store

    store, port = host_store(timeout_s)
    try:
        yield port
    finally:
        del store


def rank_env(rank: int, world: int, port: int) -> dict[str, str]:
    """The variables torchrun gives a rank, for ranks started by hand against rendezvous_store()."""
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "GLOO_SOCKET_IFNAME": "lo",
    }


def _entry(fn: Callable[..., Any], backend_name: str, rank: int, world: int, port: int, out: Any, args: tuple) -> None:
    os.environ.update(rank_env(rank, world, port))
    from commbench.backends import load_backend
    from commbench.launch.env import detect

    backend = load_backend(backend_name)()
    try:
        backend.init(60, detect())
        out.put((rank, True, fn(backend, *args)))
    except BaseException:
        out.put((rank, False, traceback.format_exc()))
    finally:
        backend.close()


def _context() -> mp.context.BaseContext:
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch.distributed", "commbench.harness", "commbench.backends.gloo"])
    return ctx


def run_ranks(
    fn: Callable[..., Any], world_size: int, *args: Any, backend: str = "gloo", timeout: float = 120
) -> list[Any]:
    """fn(backend, *args) on every rank of a real process group; returns the results by rank.

    fn must be a module-level function (it is pickled into the ranks). Ranks fork from a
    forkserver that has imported torch but never computed with it: forking the pytest process
    itself could inherit a busy OpenMP pool from an earlier test and hang.
    """
    ctx = _context()
    out = ctx.Queue()
    results: dict[int, Any] = {}
    errors: list[str] = []
    with rendezvous_store() as port:
        procs = [
            ctx.Process(target=_entry, args=(fn, backend, r, world_size, port, out, args)) for r in range(world_size)
        ]
        for p in procs:
            p.start()
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


def commbench(
    *args: str, timeout: float = 300, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the real `python -m commbench ...` in a subprocess and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "commbench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=cwd or REPO,
    )


def torchrun(
    nproc: int, *args: str, timeout: float = 300, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`torchrun --nproc_per_node=N -m commbench ...` on loopback, its rendezvous on a store this process hosts."""
    with rendezvous_store() as port:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                f"--nproc_per_node={nproc}",
                "--nnodes=1",
                "--rdzv-backend=c10d",
                f"--rdzv-endpoint=127.0.0.1:{port}",
                "-m",
                "commbench",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd or REPO,
            env={**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", **(env or {})},
        )
