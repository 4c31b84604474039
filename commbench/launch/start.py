"""How a sweep starts: in-process under a launcher (torchrun), or by spawning local ranks.

Spawned ranks rendezvous through a TCPStore that this process hosts on 127.0.0.1, with Gloo and
NCCL bound to the loopback interface, so a bare `commbench sweep` opens nothing beyond this
machine. The launcher also watches its ranks: after the first failure the others get --timeout
plus a grace period to report before they are killed, Ctrl-C stops them all, and either way one
line says where the rows measured so far are.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from commbench.console.display import PROGRESS_MARK, Display, Status
from commbench.console.lines import say
from commbench.errors import ExitCode, UserError, interrupted_code, signals_blocked, stop_on_signals, warn
from commbench.history.store import check_run_history
from commbench.launch.env import (
    LAUNCHER_PID_ENV,
    RANK_COUNT_OPTION,
    TORCH_ENV_KINDS,
    LaunchOptions,
    detect,
    export_torch_env,
)
from commbench.ops import world_error
from commbench.results.paths import default_output
from commbench.run.config import ONE_RANK_NOTE, Outcome, SweepConfig

GRACE_S = 5.0


def visible_gpus() -> int:
    """GPUs this process can use (CUDA_VISIBLE_DEVICES applies); torch reads the count without
    creating a CUDA context."""
    import torch

    return torch.cuda.device_count()


def gpu_per_rank(backend: str) -> bool:
    """True when each local rank of this backend takes a GPU of its own (its BackendInfo says)."""
    from commbench.backends import BACKENDS

    return BACKENDS[backend].gpu_per_rank()


def default_nproc(backend: str) -> int:
    """Every visible GPU where each rank takes one, else 2 ranks."""
    return max(1, visible_gpus()) if gpu_per_rank(backend) else 2


def start(cfg: SweepConfig, how: LaunchOptions) -> Outcome:
    """Run this process as one rank of a launcher's job, or spawn local ranks; returns how it ended.

    Before a rank is spawned, everything this process can know is checked: the outputs (the CSV,
    the files beside it, and the files the command writes itself after the run, claimed for it:
    results/outputs.py), the history, the host's cores and memory against the ranks and the sweep,
    the GPUs against nccl ranks. Under a launcher, rank 0 plans its outputs once the ranks meet, so
    that a refusal stops every rank (run/session.py). The outcome holds the plan where this process
    made it; the caller releases it.
    """
    from commbench.backends import BACKENDS
    from commbench.launch.worker import run_worker

    info = BACKENDS[cfg.backend]
    launch, nproc = detect(master_addr=how.master_addr, master_port=how.master_port), how.nproc
    if launch.is_rank:
        if (hint := info.launcher_error(launch.kind)) is not None:
            raise UserError(hint)
        if nproc is not None:
            how = RANK_COUNT_OPTION[launch.kind]
            raise UserError(f"--nproc is for spawning local ranks; under {launch.kind} use {how} instead")
        if launch.kind in TORCH_ENV_KINDS:
            # torch's env:// rendezvous reads torchrun's variables; srun and mpirun set their own.
            export_torch_env(launch)
        return run_worker(cfg, launch)
    chosen = nproc is None
    nproc = default_nproc(cfg.backend) if nproc is None else nproc
    # Options that depend on the number of ranks (--root) are checked before any rank starts.
    if (error := world_error(cfg.built_ops(), nproc)) is not None:
        raise UserError(error)
    path, plan = cfg.outputs().plan(lambda folder: default_output(cfg.backend, nproc, folder or "results"))
    with plan.released_on_error():
        history = check_run_history(cfg.history)  # refused here in well under a second, not by rank 0
        _check_host(cfg, nproc, how.oversubscribe)
        if nproc == 1:
            why = "1 GPU is visible, so 1 rank runs, and " if chosen else ""
            warn(f"{why}{ONE_RANK_NOTE}; start 2 or more ranks to measure it")
        # Every rank gets the absolute path: the ranks' working folder is this one, but say it plainly.
        # The files this process writes itself are claimed here: rank 0 plans the rest again.
        cfg = dataclasses.replace(cfg, output=str(path.resolve()), history=history, extra_outputs=())
        say(f"# starting {nproc} local {cfg.backend} rank{'s' if nproc > 1 else ''}")
        code = info.spawn(cfg, nproc, spawn)  # the transport's own spawner, if it has one, wraps ours
    return Outcome(code, Path(cfg.output), plan)


# How a launch may end with the next one started, mildest first: wrong results outrank an undelivered push.
SERIES_GOES_ON = (ExitCode.OK, ExitCode.UNDELIVERED, ExitCode.FAILED)


def start_launches(cfg: SweepConfig, how: LaunchOptions, repeat: int) -> Outcome:
    """`--repeat K`: K independent launches of the same measurement, as a CI job's reruns would be:
    new ranks and a new rendezvous (a new store, port and process group) each time, one after the
    other, into one CSV (the later launches append; the launch and launch_group columns tell them
    apart), each launch its own run in the history with the group's id. A launch that ends worse
    than wrong results (a usage error, a failed collective, Ctrl-C) ends the series there: the rows
    of the launches before it stay in the CSV.

    Under an external launcher (torchrun, srun, mpirun, horovodrun) this process is one rank of a
    job it did not start, and cannot start the job again: refused in one line."""
    if repeat == 1:
        return start(cfg, how)
    launch = detect(master_addr=how.master_addr, master_port=how.master_port)
    if launch.is_rank:
        raise UserError(
            f"--repeat starts its launches itself; under {launch.kind} run the job {repeat} times instead "
            f"(each run files its own history entry), or leave {launch.kind} out and use --nproc"
        )
    import uuid

    group = uuid.uuid4().hex[:12]
    outcome, worst, plan = None, ExitCode.OK, None
    for k in range(1, repeat + 1):
        say(f"# launch {k}/{repeat} (group {group})")
        this = dataclasses.replace(cfg, launch=k, launch_group=group)
        if outcome is not None:  # the later launches append to the CSV the first one created
            this = dataclasses.replace(this, output=str(outcome.output), overwrite=True, append=True, extra_outputs=())
        outcome = start(this, how)
        plan = plan or outcome.outputs  # the first launch's: it holds the claims of the extra outputs
        if outcome.code not in SERIES_GOES_ON:
            return dataclasses.replace(outcome, outputs=plan)
        worst = max(worst, outcome.code, key=SERIES_GOES_ON.index)
    say(f"# {repeat} launches (group {group}) in {outcome.output}: compare pools them as one candidate")
    return Outcome(worst, outcome.output, plan)


def _check_host(cfg: SweepConfig, nproc: int, oversubscribe: bool) -> None:
    """Refuse local ranks this host cannot run, in one line that says what to change."""
    from commbench.run.resources import local_ranks_error

    on_gpus = gpu_per_rank(cfg.backend)
    if on_gpus and nproc > (gpus := visible_gpus()):
        raise UserError(
            f"--nproc {nproc} needs {nproc} GPUs with {cfg.backend} (one per rank), but {gpus} "
            f"{'is' if gpus == 1 else 'are'} visible; use --nproc {gpus}, or --backend gloo for more ranks"
        )
    if (error := local_ranks_error(nproc, cfg.built_ops(), cfg, not on_gpus, oversubscribe)) is not None:
        raise UserError(error)


def host_store(timeout_s: float) -> tuple[Any, int]:
    """A TCPStore server on 127.0.0.1 for the ranks' rendezvous and progress records; (store, port).

    When rank 0 hosts the store, torch binds it to every interface (0.0.0.0 / ::); handing torch a
    socket already bound to loopback keeps a local sweep invisible from the network. Hosting it
    here rather than in rank 0 also keeps it alive when a rank dies, so survivors can still read
    which peer is gone (commbench/run/heartbeat.py).
    """
    sock = listening_socket()
    port = sock.getsockname()[1]  # before store_on detaches the socket
    return store_on(sock, timeout_s), port


def listening_socket() -> socket.socket:
    """A socket listening on a free loopback port, for the store (store_on): the ranks can be told
    its port, and start, before torch is imported here; their connections wait in its backlog."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    return sock


def store_on(sock: socket.socket, timeout_s: float) -> Any:
    """The TCPStore server on a socket from listening_socket() (host_store's)."""
    import datetime

    import torch.distributed as dist

    port = sock.getsockname()[1]
    return dist.TCPStore(
        "127.0.0.1",
        port,
        None,
        True,
        timeout=datetime.timedelta(seconds=timeout_s),
        wait_for_workers=False,
        master_listen_fd=sock.detach(),
    )


def _hand_over(stream: IO[str], text: str) -> None:
    """Write a rank's configuration to its stdin; a rank that died first is the supervisor's to report."""
    with contextlib.suppress(BrokenPipeError, OSError):
        stream.write(text)
        stream.close()


def _relay(stream: IO[str], err: bool, lock: threading.Lock, display: Display) -> None:
    """Pass a rank's lines through; rank 0's progress lines become the display's progress.

    The relay reads its rank's pipe to the end whatever becomes of the terminal: a rank whose pipe
    nobody drains blocks in its next print and stalls every collective. A closed stdout (`| head -1`)
    ends the printing (Display points it at /dev/null), never the run: every row still goes into the
    CSV and the run ends with its own exit code."""
    for text in iter(stream.readline, ""):
        with lock, contextlib.suppress(OSError):
            if not err and text.startswith(PROGRESS_MARK):
                display.status(Status.from_line(text))
            else:
                display.write(text, err=err)
    stream.close()


def spawn(cfg: SweepConfig, nproc: int, rank_env: Callable[[int], dict[str, str]] | None = None) -> int:
    """Start nproc local ranks, relay their output, and end them all when one fails or on Ctrl-C.

    rank_env(rank) adds a transport's own variables (Horovod's slots) to a rank's environment.
    """
    procs: list[subprocess.Popen[str]] = []
    relays: list[threading.Thread] = []
    store = None
    display: Display | None = None
    lock = threading.Lock()
    stop_on_signals()  # SIGTERM (a scheduler's time limit) and SIGHUP end the run as Ctrl-C does
    try:
        # The ranks start while this process imports torch for the store (seconds on a busy host).
        sock = listening_socket()
        port = sock.getsockname()[1]
        env = {
            **os.environ,
            LAUNCHER_PID_ENV: str(os.getpid()),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            # torchrun's convention: the agent (here, this launcher) hosts the store; ranks are clients.
            "TORCHELASTIC_USE_AGENT_STORE": "True",
            "WORLD_SIZE": str(nproc),
            "LOCAL_WORLD_SIZE": str(nproc),
            "GLOO_SOCKET_IFNAME": "lo",
            "NCCL_SOCKET_IFNAME": os.environ.get("NCCL_SOCKET_IFNAME", "lo"),
            "PYTHONUNBUFFERED": "1",
            # As torchrun does: ranks sharing a host's cores must not each run one intra-op thread
            # per core, or their thread pools spin against each other (sync_bn ran 100x slower).
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc))),
        }
        display = Display()
        config = cfg.to_json()
        for rank in range(nproc):
            with signals_blocked():  # a stop while it starts reaches the rank once it routes signals
                proc = subprocess.Popen(
                    [sys.executable, "-m", "commbench.launch.worker"],
                    env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank), **(rank_env(rank) if rank_env else {})},
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    start_new_session=True,
                )
            procs.append(proc)
            # The configuration goes in on stdin: the environment and the command line have size
            # limits (a long --sizes list once overflowed them), a pipe has none.
            threading.Thread(target=_hand_over, args=(proc.stdin, config), daemon=True).start()
            for stream, err in ((proc.stdout, False), (proc.stderr, True)):
                t = threading.Thread(target=_relay, args=(stream, err, lock, display), daemon=True)
                t.start()
                relays.append(t)
        store = store_on(sock, cfg.timeout)
        code = _supervise(procs, cfg.timeout, store)
    except KeyboardInterrupt as exc:
        # The ranks run in their own sessions, so a terminal's Ctrl-C (or a killpg of this process
        # group's SIGTERM) reaches only this process: it stops them as Ctrl-C would.
        _stop(procs, signal.SIGINT)
        code = interrupted_code(exc)
    for t in relays:
        t.join(timeout=2)
    if display is not None:
        with lock:
            display.close()
    _say_where(code, Path(cfg.output))
    return code


def _say_where(code: int, path: Path) -> None:
    """One line after a failed or interrupted sweep: where the rows measured so far are."""
    # Success and wrong results end with rank 0's own line naming the file; a refusal measured nothing.
    if code in (ExitCode.OK, ExitCode.FAILED, ExitCode.USAGE, ExitCode.UNDELIVERED):
        return
    stopped_by = {ExitCode.INTERRUPTED: "", ExitCode.TERMINATED: " by SIGTERM", ExitCode.HANGUP: " by SIGHUP"}
    what = f"interrupted{stopped_by[code]}" if code in stopped_by else "stopped early"
    if path.exists():
        say(f"commbench: {what}; results measured so far are in {path}", err=True)
    else:
        say(f"commbench: {what} before any result was written (nothing at {path})", err=True)


def _supervise(procs: list[subprocess.Popen[str]], timeout_s: float, store: Any) -> int:
    """Wait for every rank; once one fails, give the rest timeout + grace to notice, then kill them."""
    failed: int | None = None
    deadline = float("inf")
    reported: set[int] = set()
    while True:
        codes = [p.poll() for p in procs]
        for rank, code in enumerate(codes):
            if code is not None and code < 0 and rank not in reported:
                reported.add(rank)
                say(
                    f"commbench: rank {rank} (pid {procs[rank].pid}) was killed by {_signal_name(-code)}"
                    f"{_last_step(store, rank)}",
                    err=True,
                )
        if failed is None:
            bad = [c for c in codes if c not in (None, 0)]
            if bad:
                # A rank killed by a signal is a lost rank: the sweep failed like a collective does.
                failed = bad[0] if bad[0] > 0 else ExitCode.COLLECTIVE_FAILURE
                deadline = time.monotonic() + timeout_s + GRACE_S
        if all(c is not None for c in codes):
            return failed if failed is not None else 0
        if time.monotonic() > deadline:
            alive = [i for i, c in enumerate(codes) if c is None]
            say(
                f"commbench: rank(s) {', '.join(map(str, alive))} did not stop after a peer failed; killing them",
                err=True,
            )
            _stop(procs, signal.SIGKILL)
            return failed
        time.sleep(0.05)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _last_step(store: Any, rank: int) -> str:
    """' in <step>' from the rank's last progress record, or '' when it left none."""
    import torch.distributed as dist

    from commbench.run.heartbeat import read_record, store_prefix

    try:
        record = read_record(dist.PrefixStore(store_prefix(0), store), rank)
    except Exception:
        return ""
    return f" in {record.label}" if record is not None and record.label else ""


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
