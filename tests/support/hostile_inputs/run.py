"""Run a hostile case as a user would, as `python -m commbench ...` of a given checkout, in a fresh
folder, under limits that protect a shared machine from it: an address-space limit (a bomb ends in
MemoryError rather than in the machine's swap), a wall timeout after which the process group is
killed, and every process that carries the run's token killed at the end (the ranks run in their own
sessions). Measured: each command's exit, its output, the wall time and the peak RSS of the largest
process of its tree (os.wait4's ru_maxrss: a launcher's counts its ranks once it has reaped them)."""

from __future__ import annotations

import contextlib
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tests.support.hostile_inputs.case import Case, Command, Interrupt
from tests.support.hostile_inputs.checks import HISTORY, entries, snapshot

REPO = Path(__file__).resolve().parents[3]
MEMORY_LIMIT = 4 << 30  # RLIMIT_AS of each process: a MemoryError under it is what "before" looks like
FILE_LIMIT = 2 << 30  # RLIMIT_FSIZE: no file a command writes grows past it
TIMEOUT_S = 60.0
TOKEN = "COMMBENCH_HOSTILE_RUN"  # in every process a case starts, ranks included
TRACEBACKS = ("Traceback (most recent call last)", "Fatal Python error")
TIMED_OUT = "killed at timeout"
REFUSAL = "commbench: error:"  # how a refusal's one line starts
_ERROR = re.compile(r"^(?:\w+\.)*(\w+(?:Error|Exception|Interrupt|Exit))\b", re.MULTILINE)


# Signals a shell ignores in a background job (`bench ... &`, nohup): a child that inherited SIG_IGN
# for SIGINT gets no KeyboardInterrupt from Python, which would make every Ctrl-C case look deaf.
_DEFAULT = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def _limits() -> None:
    """In the child, before exec: its memory, its files, no core dump, the stop signals as a terminal's."""
    for signum in _DEFAULT:
        signal.signal(signum, signal.SIG_DFL)
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


@dataclass
class Runner:
    """Runs cases against the commbench of `tree`."""

    tree: Path = REPO
    timeout_s: float = TIMEOUT_S
    token: str = field(default_factory=lambda: uuid.uuid4().hex)

    def environment(self, command: Command) -> dict[str, str]:
        path = os.pathsep.join(p for p in (str(self.tree), os.environ.get("PYTHONPATH", "")) if p)
        return {**os.environ, "PYTHONPATH": path, "COMMBENCH_HISTORY": HISTORY, TOKEN: self.token, **command.env}

    def start(self, command: Command, folder: Path, out: IO[bytes]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "commbench", *command.argv],
            cwd=folder,
            env=self.environment(command),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_limits,
        )

    def commands(self, commands: tuple[Command, ...], folder: Path, interrupt: Interrupt | None = None) -> Finished:
        """Run the commands together in folder until every one has ended (or the timeout)."""
        with tempfile.TemporaryDirectory(prefix="hostile-out-") as scratch:
            files = [open(Path(scratch) / f"{i}.txt", "w+b") for i in range(len(commands))]  # noqa: SIM115
            try:
                procs = [self.start(c, folder, f) for c, f in zip(commands, files, strict=True)]
                finished = _wait(procs, files, self.timeout_s, interrupt)
            finally:
                self.clean_up()
                for f in files:
                    f.close()
        return finished

    def clean_up(self) -> None:
        """Kill, by pid, every commbench process still carrying this runner's token (a rank its
        launcher left behind). Only a commbench process's environment is read, for the token alone."""
        marker = f"{TOKEN}={self.token}".encode()
        for pid in (int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()):
            with contextlib.suppress(OSError):
                if b"commbench" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                    continue
                if marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                    os.kill(pid, signal.SIGKILL)

    def run(self, case: Case, bench: bool = False, keep: Path | None = None) -> Result:
        """Make the case's folder (under keep, else a temporary one removed after), run it, judge it."""
        with contextlib.ExitStack() as stack:
            if keep is None:
                folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"hostile-{case.id}-")))
            else:
                folder = keep / case.id
                folder.mkdir(parents=True)
            (folder / HISTORY).parent.mkdir()
            size = case.size(bench)
            case.make(folder, size)
            before = snapshot(folder)
            on_disk = sum(p.lstat().st_size for p in entries(folder) if p.is_file() and not p.is_symlink())
            load = os.getloadavg()[0]
            finished = self.commands(case.commands, folder, case.interrupt)
            result = Result(case, folder, before, finished, self, size=size, load=load, fixture_bytes=on_disk)
            result.judge()
        return result


@dataclass
class Finished:
    """What the commands did: each one's exit (a code, TIMED_OUT or "signal NAME") and output."""

    exits: list[int | str]
    outputs: list[str]
    wall_s: float
    peak_mb: float
    signal_to_exit_s: float | None = None
    refused_before_signal: bool = False  # the first command had printed its error line when the signal went


def _exit(status: int) -> int | str:
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else f"signal {signal.Signals(-code).name}"


def _wait(
    procs: list[subprocess.Popen[bytes]], files: list[IO[bytes]], timeout_s: float, interrupt: Interrupt | None
) -> Finished:
    began = time.monotonic()
    exits: list[int | str | None] = [None] * len(procs)
    peak_kb = 0
    signalled: float | None = None
    refused_first = False
    timed_out = False
    while any(e is None for e in exits):
        for i, proc in enumerate(procs):
            if exits[i] is None and (reaped := os.wait4(proc.pid, os.WNOHANG))[0]:
                exits[i] = TIMED_OUT if timed_out else _exit(reaped[1])
                proc.returncode = 0  # reaped here: Popen must not wait for it again
                peak_kb = max(peak_kb, reaped[2].ru_maxrss)
        now = time.monotonic()
        if signalled is None and interrupt is not None and _due(interrupt, now - began, files[0]):
            signalled = now
            refused_first = REFUSAL in _read(files[0])
            _signal(procs, exits, interrupt.signum)
        if not timed_out and now - began > timeout_s:
            timed_out = True
            _signal(procs, exits, signal.SIGKILL)
        time.sleep(0.02)
    ended = time.monotonic()
    outputs = [_read(f) for f in files]
    to_exit = None if signalled is None else ended - signalled
    return Finished(exits, outputs, ended - began, peak_kb / 1024, to_exit, refused_first)  # type: ignore[arg-type]


def _due(interrupt: Interrupt, elapsed: float, output: IO[bytes]) -> bool:
    if interrupt.after_s is not None:
        return elapsed >= interrupt.after_s
    return _read(output).count(interrupt.on_output or "") >= interrupt.times


def _signal(procs: list[subprocess.Popen[bytes]], exits: list[Any], signum: int) -> None:
    for proc, code in zip(procs, exits, strict=True):
        if code is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signum)


def _read(f: IO[bytes]) -> str:
    f.seek(0)
    return f.read().decode("utf-8", errors="replace")


@dataclass
class Result:
    """A case run: what it did and whether that is right. Also the Outcome its checks see."""

    case: Case
    folder: Path
    before: dict[str, str]
    finished: Finished
    runner: Runner
    size: int = 0
    load: float = 0.0
    fixture_bytes: int = 0  # what the case's files take on disk
    checks: dict[str, str | None] = field(default_factory=dict)

    @property
    def exits(self) -> list[int | str]:
        return self.finished.exits

    @property
    def output(self) -> str:
        """Every command's output, the case's folder named <folder> (its name holds the case's id)."""
        return "\n".join(self.finished.outputs).replace(str(self.folder), "<folder>")

    def commbench(self, *argv: str) -> tuple[int | str, str]:
        finished = self.runner.commands((Command(argv),), self.folder)
        return finished.exits[0], finished.outputs[0]

    def judge(self) -> None:
        for check in self.case.checks:
            self.checks[check.__name__] = check(self)

    def one_line(self) -> list[bool]:
        """Per command: its output is exactly one non-empty line."""
        return [len([line for line in out.splitlines() if line.strip()]) == 1 for out in self.finished.outputs]

    def traceback(self) -> bool:
        return any(marker in self.output for marker in TRACEBACKS)

    def error(self) -> str | None:
        """The exception a traceback ends in (MemoryError, TypeError, ...), where there is one."""
        found = _ERROR.findall(self.output) if self.traceback() else []
        return found[-1] if found else None

    def allowed(self) -> frozenset[int | str]:
        """The right exits: the case's, or 128 + the signal once its signal was sent (a run that
        ignores it and ends on its own, as a read deaf to Ctrl-C does, is wrong whatever its code).
        Ended by the signal itself (before Python routes it, or after the run's end) is the same to
        a shell: 128 + the signal. A run that had printed its refusal before the signal went keeps
        the case's exits too: it had already answered."""
        interrupt = self.case.interrupt
        if interrupt is None or self.finished.signal_to_exit_s is None:
            return frozenset(self.case.exits)
        stopped = frozenset({128 + interrupt.signum, f"signal {interrupt.signum.name}"})
        return stopped | self.case.exits if self.finished.refused_before_signal else stopped

    def wrongs(self) -> list[str]:
        """What is not right, in words; empty when the case passes."""
        found = [
            f"exit {code}, not {sorted(allowed, key=str)}"
            for code in self.exits
            if code not in (allowed := self.allowed())
        ]
        found += [
            "exit 2 in more than one line"
            for code, one in zip(self.exits, self.one_line(), strict=True)
            if code == 2 and not one
        ]
        found += ["a traceback"] if self.traceback() else []
        return found + [f"{name}: {why}" for name, why in self.checks.items() if why is not None]

    def as_dict(self) -> dict[str, Any]:
        case = self.case
        return {
            "id": case.id,
            "group": case.group,
            "what": case.what,
            "size": self.size,
            "size_note": case.sizes.note if case.sizes and self.size == case.sizes.bench else "",
            "fixture_bytes": self.fixture_bytes,
            "exits": self.exits,
            "one_line": self.one_line(),
            "traceback": self.traceback(),
            "error": self.error(),
            "wall_s": round(self.finished.wall_s, 2),
            "peak_mb": round(self.finished.peak_mb, 1),
            "signal_to_exit_s": None
            if self.finished.signal_to_exit_s is None
            else round(self.finished.signal_to_exit_s, 2),
            "checks": self.checks,
            "right": not self.wrongs(),
            "wrongs": self.wrongs(),
            "load_1min": round(self.load, 2),
            "output_tail": self.output[-2000:],
        }
