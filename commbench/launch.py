"""How a sweep starts: in-process under a launcher (torchrun), or by spawning local ranks.

Spawned ranks rendezvous on 127.0.0.1 with a free port and Gloo bound to the loopback interface,
so a bare `commbench sweep` opens nothing beyond this machine.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import IO, Callable

import click

from commbench.config import SweepConfig
from commbench.worker import CONFIG_ENV, INTERRUPTED_EXIT_CODE

GRACE_S = 5.0


def launched_by_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and CONFIG_ENV not in os.environ


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _relay(stream: IO[str], err: bool, lock: threading.Lock) -> None:
    for text in iter(stream.readline, ""):
        with lock:
            click.echo(text, nl=False, err=err)
    stream.close()


def spawn(cfg: SweepConfig, nproc: int, output_hint: str, rank_env: Callable[[int], dict[str, str]] | None = None) -> int:
    """Start nproc local ranks, relay their output, and end them all when one fails or on Ctrl-C.

    rank_env(rank) adds a launcher's own variables (Horovod's slots) to a rank's environment.
    """
    env = {
        **os.environ,
        CONFIG_ENV: cfg.to_json(),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": str(nproc),
        "LOCAL_WORLD_SIZE": str(nproc),
        "GLOO_SOCKET_IFNAME": "lo",
        "PYTHONUNBUFFERED": "1",
    }
    lock = threading.Lock()
    procs: list[subprocess.Popen[str]] = []
    relays: list[threading.Thread] = []
    for rank in range(nproc):
        proc = subprocess.Popen(
            [sys.executable, "-m", "commbench.worker"],
            env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank), **(rank_env(rank) if rank_env else {})},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        procs.append(proc)
        for stream, err in ((proc.stdout, False), (proc.stderr, True)):
            t = threading.Thread(target=_relay, args=(stream, err, lock), daemon=True)
            t.start()
            relays.append(t)
    try:
        code = _supervise(procs, cfg.timeout)
    except KeyboardInterrupt:
        _stop(procs, signal.SIGINT)
        code = INTERRUPTED_EXIT_CODE
    for t in relays:
        t.join(timeout=2)
    if code == INTERRUPTED_EXIT_CODE:
        click.echo(f"commbench: interrupted; results measured so far are in {output_hint}", err=True)
    return code


def _supervise(procs: list[subprocess.Popen[str]], timeout_s: float) -> int:
    """Wait for every rank; once one fails, give the rest timeout + grace to notice, then kill them."""
    failed: int | None = None
    deadline = float("inf")
    while True:
        codes = [p.poll() for p in procs]
        if failed is None:
            bad = [c for c in codes if c not in (None, 0)]
            if bad:
                failed = bad[0]
                deadline = time.monotonic() + timeout_s + GRACE_S
        if all(c is not None for c in codes):
            return failed if failed is not None else 0
        if time.monotonic() > deadline:
            alive = [i for i, c in enumerate(codes) if c is None]
            click.echo(f"commbench: rank(s) {', '.join(map(str, alive))} did not stop after a peer failed; killing them", err=True)
            _stop(procs, signal.SIGKILL)
            return failed
        time.sleep(0.05)


def _stop(procs: list[subprocess.Popen[str]], sig: int) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(sig)
    end = time.monotonic() + GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
