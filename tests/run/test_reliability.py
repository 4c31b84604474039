"""Failures end with a diagnosis and lose no result: dead and hung ranks, Ctrl-C, broken launches.

Every scenario runs real processes: `commbench sweep` spawning Gloo ranks, two hand-launched ranks,
two torchrun "nodes". Timeouts are short (the machine is shared); durations are only ever checked
against generous upper bounds, as the promise is "exits within --timeout plus a few seconds".
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch.distributed as dist

from commbench.backends.gloo import GlooBackend
from commbench.errors import UserError
from commbench.ops.all_gather import AllGather
from commbench.ops.base import Op
from commbench.ops.reduce_scatter_base import ReduceScatterBase
from commbench.results.schema import COLUMNS
from commbench.results.writer import CsvAppender
from commbench.run import resources
from commbench.run.config import SweepConfig
from commbench.run.heartbeat import Heartbeat, RankRecord
from commbench.run.resources import host_available_bytes, memory_error
from commbench.units import format_size
from tests.support.distributed import REPO, commbench, rank_env, rendezvous_store

TIMEOUT_S = 5
SLACK_S = 30  # a loaded, shared machine: the bound only catches "never exits"
# Long enough on any machine to be interrupted mid-way (the tests stop it after the first rows).
LONG_SWEEP = ("--op", "all_gather", "--sizes", "8,1K,64K,1M,4M,16M", "--iters", "300", "--warmup", "1")


def _whole_or_marked(frame) -> bool:
    """Every row kept is a finished case (ok) or one the stop cut short, marked so (stopped, its
    check not run): never an unchecked row that reads ok."""
    stopped = frame[frame["status"] == "stopped"]
    return set(frame["status"]) <= {"ok", "stopped"} and all(
        "its check not run" in str(note) for note in stopped["note"]
    )


def _sweep(out: Path, *args: str, new_session: bool = False) -> subprocess.Popen[str]:
    """`commbench sweep` in the background from the repo root (so `tests.support.plugins` imports in the ranks);
    new_session: in a process group of its own, as a batch job's step runs (its pid is the group's id)."""
    cmd = [
        sys.executable,
        *"-m commbench sweep --backend gloo --nproc 2 --no-plot --timeout".split(),
        str(TIMEOUT_S),
        "-o",
        str(out),
        *args,
    ]
    return subprocess.Popen(
        cmd,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        start_new_session=new_session,
    )


def _rank_pids(launcher: int) -> dict[int, int]:
    """{rank: pid} of the launcher's children, read from /proc."""
    ranks = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            env = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError):
            continue
        rank = [e[5:] for e in env if e.startswith(b"RANK=")]
        if ppid == launcher and rank:
            ranks[int(rank[0])] = int(entry.name)
    return ranks


def _wait_for_rows(path: Path, rows: int, proc: subprocess.Popen[str], limit_s: float = 120) -> None:
    end = time.monotonic() + limit_s
    while not (path.exists() and len(path.read_text().splitlines()) > rows):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, "the sweep wrote no rows"
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _listening(pids: list[int]) -> list[tuple[str, int]]:
    """(address, port) of every listening TCP socket the processes hold, from /proc/net/tcp{,6}."""
    inodes = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = []
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # 0A: LISTEN
                hex_addr, hex_port = local.split(":")
                raw = bytes.fromhex(hex_addr)
                # /proc prints the address as host-order 32-bit words
                raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
                found.append((socket.inet_ntop(family, raw), int(hex_port, 16)))
    return found


def _read(path: Path) -> pd.DataFrame:
    frame = pd.read_csv(path)
    assert list(frame.columns) == list(COLUMNS)
    return frame


# -- 1. a rank killed mid-sweep ---------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("victim", [1, 0])  # 0 is the rank writing the CSV
def test_a_killed_rank_is_named_and_every_completed_row_survives(tmp_path, victim):
    out = tmp_path / "new" / "folder" / "run.csv"  # a missing output folder is created
    proc = _sweep(out, *LONG_SWEEP)
    _wait_for_rows(out, 2, proc)
    pids = _rank_pids(proc.pid)
    assert sorted(pids) == [0, 1]
    os.kill(pids[victim], signal.SIGKILL)
    killed = time.monotonic()
    _, err = proc.communicate(timeout=TIMEOUT_S + SLACK_S + 60)
    assert time.monotonic() - killed < TIMEOUT_S + SLACK_S, err
    assert proc.returncode == 3, err
    survivor = 1 - victim
    # The launcher names the lost rank and where it was; the survivor names the op, size and lost rank.
    assert f"rank {victim} (pid {pids[victim]}) was killed by SIGKILL in all_gather/" in err, err
    survivor_line = next(line for line in err.splitlines() if line.startswith(f"commbench: rank {survivor}:"))
    assert "all_gather/" in survivor_line and " bytes" in survivor_line, err
    assert f"rank {victim} is gone" in survivor_line, err
    assert f"results measured so far are in {out}" in err.splitlines()[-1], err
    frame = _read(out)
    assert len(frame) >= 2 and _whole_or_marked(frame)
    assert not [p for p in pids.values() if _alive(p)]


# -- 2. a hung collective -----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "op, names",
    [
        # rank 1 never issues the call: rank 0 waits on an async wait object / a coalesced group
        ("tests.support.plugins:HangOnRank1", ["hang_on_rank1/flat/comm float32 at 4096 bytes", "rank 1 is behind"]),
        (
            "tests.support.plugins:HangOnRank1Coalesced",
            ["hang_on_rank1_coalesced/flat/comm float32 at 4096 bytes", "rank 1 is behind"],
        ),
        # a wait object no torch timeout covers: only the watchdog ends it
        (
            "tests.support.plugins:NeverCompletes",
            [f"timed out after {TIMEOUT_S}s in never_completes/flat/comm float32 at 4096 bytes"],
        ),
    ],
)
def test_a_hung_collective_ends_within_the_timeout_with_a_diagnosis(tmp_path, op, names):
    out = tmp_path / "run.csv"
    proc = _sweep(out, "--op", op, "--sizes", "8,4K", "--iters", "3", "--warmup", "1")
    _wait_for_rows(out, 1, proc)
    hung_from = time.monotonic()
    pids = list(_rank_pids(proc.pid).values())
    _, err = proc.communicate(timeout=TIMEOUT_S + SLACK_S + 60)
    assert time.monotonic() - hung_from < TIMEOUT_S + SLACK_S, err
    assert proc.returncode == 3, err
    for fragment in names:
        assert fragment in err, err
    assert "Traceback" not in err
    frame = _read(out)
    assert frame["size_bytes"].tolist() == [8] and _whole_or_marked(frame)
    assert not [p for p in pids if _alive(p)]


# -- 3. Ctrl-C, and 7. nothing listens beyond loopback --------------------------------------------


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """A spawned sweep, its listening sockets observed mid-run, then SIGINT to the launcher."""
    out = tmp_path_factory.mktemp("interrupt") / "run.csv"
    proc = _sweep(out, *LONG_SWEEP)
    _wait_for_rows(out, 2, proc)
    pids = _rank_pids(proc.pid)
    sockets = _listening([proc.pid, *pids.values()])
    proc.send_signal(signal.SIGINT)  # what Ctrl-C delivers: the ranks sit in their own sessions
    sent = time.monotonic()
    _, err = proc.communicate(timeout=SLACK_S + 60)
    return {
        "code": proc.returncode,
        "err": err,
        "seconds": time.monotonic() - sent,
        "out": out,
        "pids": list(pids.values()),
        "sockets": sockets,
    }


@pytest.mark.slow
def test_ctrl_c_stops_the_ranks_keeps_the_rows_and_says_where(interrupted):
    assert interrupted["code"] == 130, interrupted["err"]
    assert interrupted["seconds"] < SLACK_S
    lines = interrupted["err"].strip().splitlines()
    assert lines[-1] == f"commbench: interrupted; results measured so far are in {interrupted['out']}"
    assert "Traceback" not in interrupted["err"]
    frame = _read(interrupted["out"])
    assert len(frame) >= 2 and _whole_or_marked(frame)
    assert not [p for p in interrupted["pids"] if _alive(p)]


@pytest.mark.slow
def test_a_spawned_sweep_listens_on_loopback_only(interrupted):
    # the launcher's rendezvous store and each rank's Gloo listener, all on 127.0.0.1
    assert len(interrupted["sockets"]) >= 3, interrupted["sockets"]
    assert {addr for addr, _ in interrupted["sockets"]} <= {"127.0.0.1", "::1"}, interrupted["sockets"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "code", "every_process"),
    [
        (signal.SIGTERM, 143, False),  # SLURM's time limit or preemption, to the launcher's process group
        (signal.SIGTERM, 143, True),  # ... and to the ranks too, as SLURM signals every process of a step
        (signal.SIGHUP, 129, False),  # the terminal or the session went away
    ],
)
def test_sigterm_and_sighup_stop_the_run_as_ctrl_c_does(tmp_path, sig, code, every_process):
    from commbench.history.query import list_runs
    from commbench.history.store import open_history

    out = tmp_path / "run.csv"
    proc = _sweep(out, *LONG_SWEEP, "--history", str(tmp_path / "h.sqlite"), new_session=True)
    _wait_for_rows(out, 2, proc)
    ranks = list(_rank_pids(proc.pid).values())
    os.killpg(proc.pid, sig)  # the launcher's process group; its ranks sit in sessions of their own
    for pid in ranks if every_process else ():
        os.kill(pid, sig)
    sent = time.monotonic()
    _, err = proc.communicate(timeout=SLACK_S + 60)
    assert proc.returncode == code, err
    assert time.monotonic() - sent < SLACK_S  # "within a few seconds": here about 3 s, under load
    name = signal.Signals(sig).name
    assert err.strip().splitlines()[-1] == f"commbench: interrupted by {name}; results measured so far are in {out}"
    assert "Traceback" not in err and "killed by" not in err, err
    assert len(_read(out)) >= 2
    assert not [p for p in ranks if _alive(p)]
    history = open_history(str(tmp_path / "h.sqlite"), create=False)
    (run,) = list_runs(history)
    history.close()
    assert run["status"] == "interrupted" and run["rows"] == len(_read(out))


# -- 4. an inconsistent launch ----------------------------------------------------------------------


@pytest.mark.slow
def test_ranks_launched_with_different_options_stop_before_the_first_collective(tmp_path):
    out = tmp_path / "run.csv"
    with rendezvous_store() as port:
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    *"-m commbench sweep --backend gloo --op all_gather --sizes 8 --iters".split(),
                    str(3 + rank),
                    *"--no-plot --timeout 60 -o".split(),
                    str(out),
                ],
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, **rank_env(rank, 2, port)},
            )
            for rank in (0, 1)
        ]
        results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [2, 2], results
    assert results[0][1].strip() == (
        "commbench: error: ranks were launched with different options: iters differs between rank 0 and rank 1; "
        "launch every rank with the same command"
    )
    assert "commbench" not in results[1][1]  # one report, from rank 0
    assert not out.exists()  # nothing was measured


# -- 5. two torchrun "nodes" on one machine --------------------------------------------------------


@pytest.mark.slow
def test_two_torchrun_nodes_on_loopback_record_both_node_ranks(tmp_path):
    out = tmp_path / "run.csv"
    with rendezvous_store() as port:
        nodes = [
            subprocess.Popen(
                [
                    sys.executable,
                    *"-m torch.distributed.run --nnodes=2 --nproc_per_node=1 --rdzv-backend=c10d".split(),
                    f"--rdzv-endpoint=127.0.0.1:{port}",
                    *"-m commbench sweep --backend gloo --op all_gather --sizes 8,1K --iters 3 --warmup 1 --no-plot -o".split(),
                    str(out),
                ],
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"},
            )
            for _node in (0, 1)
        ]
        results = [n.communicate(timeout=240) for n in nodes]
    assert [n.returncode for n in nodes] == [0, 0], results
    frame = _read(out)
    host = socket.gethostname()
    assert len(frame) == 2 * 3 and (frame["world_size"] == 2).all()  # 2 sizes x flat, list, inplace
    assert set(frame["node_ranks"]) == {f"0@{host}/0;1@{host}/1"}


# -- 6. resources and files --------------------------------------------------------------------------


@pytest.mark.slow
def test_a_size_that_cannot_fit_is_refused_before_allocation(tmp_path):
    out = tmp_path / "run.csv"
    result = commbench(
        *"sweep --backend gloo --nproc 2 --op all_gather --sizes 8,64G --no-plot -o".split(),
        str(out),
        timeout=180,
    )
    assert result.returncode == 2, result.stderr
    error = result.stderr.strip().splitlines()
    assert len(error) == 1, result.stderr
    # Refused by the launcher: input S/2, output S and Gloo's flat copy of the output, 2.5 S per rank.
    assert error[0].startswith("commbench: error: 2 ranks would need about 3"), error
    assert "plus 160G each for all_gather at 64G" in error[0] and "available on this host (MemAvailable)" in error[0]
    assert not out.exists()


def test_memory_estimate_against_host_memory(tmp_path, monkeypatch):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16000000 kB\nMemFree:  100 kB\nMemAvailable:    8388608 kB\n")
    assert host_available_bytes(meminfo) == 8 << 30
    monkeypatch.setattr(resources, "host_available_bytes", lambda: host_available_bytes(meminfo))
    backend = GlooBackend()
    backend.world_size = 2
    op = AllGather()

    def need(size: int, op: Op = op, **options: object) -> int:
        cfg = SweepConfig(backend="gloo", ops=(op.name,), sizes=(8, size), **options)  # type: ignore[arg-type]
        largest = resources.largest_need([op], cfg, 2, on_host=True)
        assert largest is not None
        return largest[0]

    assert memory_error([op], SweepConfig("gloo", ("all_gather",), (1 << 30,)), backend, local_ranks=1) is None
    message = memory_error([op], SweepConfig("gloo", ("all_gather",), (8, 64 << 30)), backend, local_ranks=4)
    per_rank = need(64 << 30) + resources.RUNTIME_GROWTH_BYTES
    assert message == (
        f"all_gather at 64G needs about {format_size(per_rank)} per rank x 4 ranks on this host = "
        f"{format_size(4 * per_rank)}, but only 8G is available on this host (MemAvailable); lower "
        "--max-bytes or --sizes, or run fewer ranks per host"
    )
    # Gloo runs two calls at a time, each with its own copy of the output: the window counts.
    assert need(1 << 30, mode="nonblocking", window=8) == need(1 << 30) + (1 << 30)
    # Only the variants that will run count: Gloo's list reduce-scatter copies half the input, the flat one all of it.
    scatter = ReduceScatterBase()
    assert need(1 << 30, scatter, variants=("list",)) == need(1 << 30, scatter) - (1 << 29)


@pytest.mark.slow
def test_an_existing_output_is_never_silently_overwritten(tmp_path):
    out = tmp_path / "run.csv"
    out.write_text("precious\n")
    result = commbench("sweep", "--backend", "gloo", "--op", "all_gather", "--sizes", "8", "--no-plot", "-o", str(out))
    assert result.returncode == 2
    assert "already exists; choose another --output or pass --overwrite" in result.stderr
    assert out.read_text() == "precious\n"
    # and the writer itself refuses a file that appeared after that check, rather than truncating it
    with pytest.raises(UserError, match="already exists"):
        CsvAppender(out, COLUMNS, overwrite=False)
    assert out.read_text() == "precious\n"


# -- the diagnosis itself ----------------------------------------------------------------------------


def test_the_board_names_gone_behind_and_stopped_ranks():
    store = dist.HashStore()
    label = "all_gather/flat/comm float32 at 4096 bytes"
    store.set("1", json.dumps(RankRecord(beat=7, issued=12, label=label).__dict__))  # never beats again: gone
    store.set("2", json.dumps(RankRecord(beat=1, issued=11, label=label).__dict__))  # alive, one call short
    store.set("3", json.dumps(RankRecord(beat=1, issued=12, label=label, state="failed in x").__dict__))
    board = Heartbeat(store, 0, 5, 0.05, local=lambda: (12, label), stale_s=0.3)

    def between_reads(seconds: float) -> None:  # rank 2's heartbeat moves on while rank 0 diagnoses
        assert seconds == 0.3
        store.set("2", json.dumps(RankRecord(beat=2, issued=11, label=label).__dict__))

    found = board.diagnose(wait=between_reads)
    assert "rank 1 is gone (no heartbeat for 0.3s; last seen in all_gather/flat/comm float32 at 4096 bytes)" in found
    assert "rank 2 is behind: it issued 11 collectives, the others 12" in found
    assert "rank 3 has stopped (failed in x)" in found
    assert "rank 4 never reported" in found


class _FlakyStore(dict):
    """A store whose set() fails a few times, as a loaded rendezvous server can."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def set(self, key: str, value: str) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise RuntimeError("connection reset by peer")
        self[key] = value


def test_the_heartbeat_outlives_a_transient_store_error():
    store = _FlakyStore(failures=0)
    board = Heartbeat(store, 0, 2, 0.01, local=lambda: (0, "x"))
    board.start()
    store.failures = 3  # the next three beats fail
    deadline = time.monotonic() + 30
    while (store.failures > 0 or json.loads(store["0"])["beat"] < 6) and time.monotonic() < deadline:
        time.sleep(0.01)
    board.finish("finished")
    assert json.loads(store["0"])["beat"] >= 6, "the heartbeat stopped at the first store error"
