"""Ranks on this machine that report different hosts (COMMBENCH_HOST), started as a launcher would
start them: a cluster of named hosts over loopback, for tests that need hosts but no root."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence

from tests.support.distributed import REPO, rank_env, rendezvous_store


@contextlib.contextmanager
def ranks_on_fake_hosts(
    hosts: Sequence[str], *args: str, env: dict[str, str] | None = None
) -> Iterator[list[subprocess.Popen[str]]]:
    """`python -m commbench ARGS` as rank r of len(hosts), on host hosts[r], for as long as the block
    runs; whatever is still running when it ends is killed."""
    local: dict[str, int] = {}
    with rendezvous_store() as port:
        procs = []
        for rank, host in enumerate(hosts):
            local[host] = local.get(host, -1) + 1
            rank_vars = {
                **rank_env(rank, len(hosts), port),
                "LOCAL_RANK": str(local[host]),
                "LOCAL_WORLD_SIZE": str(list(hosts).count(host)),
                "COMMBENCH_HOST": host,
                "OMP_NUM_THREADS": "1",
            }
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "commbench", *args],
                    cwd=REPO,
                    env={**os.environ, **rank_vars, **(env or {})},
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        try:
            yield procs
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()


def run_on_fake_hosts(
    hosts: Sequence[str], *args: str, timeout: float = 300, env: dict[str, str] | None = None
) -> list[subprocess.CompletedProcess[str]]:
    """`python -m commbench ARGS` as rank r of len(hosts), on host hosts[r]; each rank's result."""
    with ranks_on_fake_hosts(hosts, *args, env=env) as procs:
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return results
