"""SIGTERM and SIGHUP stop a run as Ctrl-C does (commbench/errors.py): raised where KeyboardInterrupt
is, with 128 + the signal as the exit code, and held back while a row is being written."""

from __future__ import annotations

import os
import signal

import pytest

from commbench.errors import Stopped, interrupted_code, signals_held, stop_on_signals


@pytest.fixture
def routed():
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    stop_on_signals()
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)])
def test_a_stop_signal_is_an_interrupt_with_its_exit_code(routed, sig, code):
    with pytest.raises(KeyboardInterrupt) as stopped:
        os.kill(os.getpid(), sig)  # to this process: its handler runs before kill() returns
    assert interrupted_code(stopped.value) == code
    assert isinstance(stopped.value, Stopped) == (sig != signal.SIGINT)


def test_a_signal_waits_for_the_row_being_written(routed):
    written = []
    with pytest.raises(Stopped), signals_held():
        os.kill(os.getpid(), signal.SIGTERM)
        written.append("csv")  # the handler ran here and held the signal back
        written.append("history")
    assert written == ["csv", "history"]
