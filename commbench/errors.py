"""How commbench ends: one enum of exit codes, the user error every layer raises, and the one channel
its warnings travel by. Nothing here writes to the terminal: the program's entry point (the CLI, a
rank's worker) shows what arrives (commbench.console.lines)."""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from enum import IntEnum
from pathlib import Path
from typing import Any


class ExitCode(IntEnum):
    """Every exit code commbench uses; docs/failure-modes.md explains each."""

    OK = 0
    FAILED = 1  # wrong results in a sweep, a regression (or wrong results) in `compare`, a flag in `isolate`
    USAGE = 2  # a mistake the user can fix: bad input, an impossible combination, a refusal
    COLLECTIVE_FAILURE = 3  # a collective failed or timed out, or a rank was lost
    INTERNAL = 4  # a bug in commbench: the traceback is printed, to be reported
    INCONCLUSIVE = 5  # `compare` found no regression but could not have seen one of the threshold's size
    UNDELIVERED = 6  # every result written, but the metrics could not be pushed (--metrics-push: the Pushgateway)
    HANGUP = 129  # SIGHUP (128 + 1): the terminal or the session went away
    INTERRUPTED = 130  # Ctrl-C (SIGINT, 128 + 2)
    TERMINATED = 143  # SIGTERM (128 + 15): a scheduler's time limit or preemption (SLURM, before SIGKILL)


# The signals that stop a run as Ctrl-C does (the rows kept, one line naming them, 128 + the signal).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where Ctrl-C raises KeyboardInterrupt, so that every path that ends
    a run on Ctrl-C ends it alike on them; `signum` names the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def interrupted_code(exc: KeyboardInterrupt) -> int:
    """The exit code of a run stopped by Ctrl-C or a stop signal: 128 + the signal, as a shell says."""
    return 128 + getattr(exc, "signum", signal.SIGINT)


# A signal that arrived while signals_held() ran, delivered when it ends (main thread only).
_HOLD: dict[str, Any] = {"depth": 0, "pending": None}


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP held back while the block runs (a row written to the CSV and the
    history: both or neither), then delivered. Holds only what stop_on_signals() routes."""
    _HOLD["depth"] += 1
    try:
        yield
    finally:
        _HOLD["depth"] -= 1
        if not _HOLD["depth"] and (pending := _HOLD["pending"]) is not None:
            _HOLD["pending"] = None
            _deliver(pending)


def _deliver(signum: int) -> None:
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    for sig in STOP_SIGNALS:  # a second one while the first is handled is ignored: the run is stopping
        signal.signal(sig, signal.SIG_IGN)
    raise Stopped(signum)


def _on_signal(signum: int, _frame: Any) -> None:
    if _HOLD["depth"]:
        _HOLD["pending"] = _HOLD["pending"] or signum
        return
    _deliver(signum)


def stop_on_signals() -> None:
    """From now on SIGTERM and SIGHUP raise Stopped in the main thread, as SIGINT raises
    KeyboardInterrupt, and all three wait for the end of a signals_held() block."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, *STOP_SIGNALS):
        signal.signal(sig, _on_signal)
    if sys.unraisablehook is not _unraisable:
        _HOLD["hook"] = sys.unraisablehook
        sys.unraisablehook = _unraisable
    # A rank started under signals_blocked() inherited the mask: a stop sent while it started is
    # delivered now, where it is routed.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGINT, *STOP_SIGNALS))


@contextlib.contextmanager
def signals_blocked() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP blocked while the block starts a child process (main thread
    only). The child inherits the mask, so a stop sent to it while its interpreter starts waits
    until it routes the signals itself (stop_on_signals), instead of breaking its start-up with a
    traceback ("Fatal Python error: init_import_site"); here, one that arrived is delivered when
    the block ends."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGINT, *STOP_SIGNALS))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _unraisable(unraisable: Any) -> None:
    """A stop that landed in a finalizer or a weakref callback, where Python ignores exceptions (and
    prints them as "Exception ignored in ..."): kept pending instead, delivered where the next
    signals_held() block ends (the next row written), with the stop signals routed again."""
    exc = unraisable.exc_value
    if isinstance(exc, KeyboardInterrupt):
        signum = getattr(exc, "signum", signal.SIGINT)
        for sig in (signal.SIGINT, *STOP_SIGNALS):
            signal.signal(sig, _on_signal)
        _HOLD["pending"] = _HOLD["pending"] or signum
        return
    _HOLD.get("hook", sys.__unraisablehook__)(unraisable)


def closest(given: str, choices: Iterable[str]) -> str | None:
    """The choice nearest a mistyped name (difflib's ratio, at least 0.6), or None."""
    close = difflib.get_close_matches(given, list(choices), n=1, cutoff=0.6)
    return close[0] if close else None


def did_you_mean(given: str, choices: Iterable[str]) -> str:
    """' (did you mean X?)' for the choice nearest a mistyped name, or ''."""
    return f" (did you mean {near}?)" if (near := closest(given, choices)) else ""


class UserError(Exception):
    """A mistake the user can fix; the message says how. Bugs keep their traceback instead. The entry
    point prints `line()` alone and exits with `exit_code`."""

    exit_code = ExitCode.USAGE

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def format_message(self) -> str:
        return self.message

    def line(self) -> str:  # one line, prefixed like the rest of commbench's output
        return f"commbench: error: {self.message}"


class CommbenchWarning(UserWarning):
    """A warning of commbench's where no entry point shows them: commbench used as a library."""


# Who shows a warning: the one the entry point installed last (warnings_shown_by), else Python's
# warnings (commbench used as a library, a test). Library layers call warn() and nothing else.
_SHOWERS: list[Callable[[str], None]] = []


def warn(text: str) -> None:
    """Say something went wrong that does not stop the run (text without the `commbench: warning:`
    prefix, which the shower adds)."""
    if _SHOWERS:
        _SHOWERS[-1](text)
    else:
        warnings.warn(text, CommbenchWarning, stacklevel=2)


@contextlib.contextmanager
def warnings_shown_by(show: Callable[[str], None]) -> Iterator[None]:
    """Every warn() while the block runs goes to show (the CLI's and a rank's: one line on stderr)."""
    _SHOWERS.append(show)
    try:
        yield
    finally:
        _SHOWERS.remove(show)


# torchrun names this file in each worker's environment and, when a worker fails, prints the first
# failure's message from it in its summary (torch.distributed.elastic's ErrorHandler writes it).
ELASTIC_ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"


def tell_launcher(line: str, details: str | None = None) -> None:
    """Hand commbench's last line (and, for a bug, its traceback) to torchrun's error file, in the
    layout torch's @record writes, so torchrun's failure summary shows it instead of a link to its
    docs. Nothing happens outside torchrun; a file that cannot be written costs nothing but the line."""
    path = os.environ.get(ELASTIC_ERROR_FILE_ENV)
    if not path:
        return
    stamp = str(int(time.time()))
    data = {"message": {"message": line, "extraInfo": {"py_callstack": details or line, "timestamp": stamp}}}
    with contextlib.suppress(OSError):
        Path(path).write_text(json.dumps(data))
