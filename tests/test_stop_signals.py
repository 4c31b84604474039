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


def test_a_stop_that_lands_in_a_weakref_callback_is_kept_for_the_next_row(routed, capsys):
    """Python ignores an exception raised in a weakref callback (it prints "Exception ignored in"):
    a stop signal that arrives there is kept and delivered where the next row's write ends."""
    import sys
    import weakref

    class Thing:
        pass

    def callback(_ref):
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, inside the callback

    thing = Thing()
    ref = weakref.ref(thing, callback)
    try:
        del thing  # the callback runs, Stopped is raised in it, and Python would ignore it
        assert ref() is None
        written = []
        with pytest.raises(Stopped), signals_held():
            written.append("row")
        assert written == ["row"]
        assert "Exception ignored" not in capsys.readouterr().err
        # Other exceptions a callback raises still reach Python's own hook.
        other = Thing()
        keep = weakref.ref(other, lambda _ref: 1 / 0)
        seen = []
        from commbench import errors

        assert sys.unraisablehook is errors._unraisable
        errors._HOLD["hook"], hook = seen.append, errors._HOLD.get("hook")
        try:
            del other
        finally:
            errors._HOLD["hook"] = hook
        assert keep() is None and isinstance(seen[0].exc_value, ZeroDivisionError)
    finally:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stop_sent_while_a_rank_starts_waits_until_it_routes_signals(sig):
    """A rank started under signals_blocked() (the spawner's) and stopped at once, while its
    interpreter still starts (--repeat's next launch, stopped): no "Fatal Python error:
    init_import_site" traceback; the stop arrives once the rank routes it, as an interrupt with its code."""
    import subprocess
    import sys

    from commbench.errors import signals_blocked

    child = (
        "import sys, time\n"
        "from commbench.errors import interrupted_code, stop_on_signals\n"
        "time.sleep(0.5)\n"  # the stop arrives during this, as during site's import
        "try:\n"
        "    stop_on_signals()\n"
        "    time.sleep(30)\n"
        "except KeyboardInterrupt as exc:\n"
        "    print('stopped', flush=True)\n"
        "    sys.exit(interrupted_code(exc))\n"
    )
    with signals_blocked():
        proc = subprocess.Popen(
            [sys.executable, "-c", child], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out.strip(), err) == (128 + sig, "stopped", "")
