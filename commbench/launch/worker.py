"""Entry point of one rank: `python -m commbench.launch.worker`, its SweepConfig as JSON on stdin.

The same run_worker() serves ranks started by a launcher (in-process) and by commbench's spawner.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import traceback

from commbench.backends.job import Launch
from commbench.console.lines import say, show_user_error, show_warning
from commbench.errors import ExitCode, UserError, interrupted_code, stop_on_signals, tell_launcher, warnings_shown_by
from commbench.launch.env import LAUNCHER_PID_ENV, detect
from commbench.run.agreement import PeerError
from commbench.run.config import Outcome, SweepConfig


def run_worker(cfg: SweepConfig, launch: Launch) -> Outcome:
    """Run this rank and turn every expected failure into one line and an exit code."""
    stop_on_signals()  # a scheduler's SIGTERM to every process of the job: the rows kept, as on Ctrl-C
    try:
        from commbench.run.failures import CollectiveFailure
        from commbench.run.runner import run_rank

        try:
            with warnings_shown_by(show_warning):  # a spawned rank has no CLI around it to show them
                return run_rank(cfg, launch)
        except UserError as exc:
            show_user_error(exc)
            return Outcome(exc.exit_code)
        except PeerError as exc:
            # torchrun's summary names the first rank to exit: often this one, so it gets the line too.
            tell_launcher(
                f"commbench: error: {exc.message} (found by rank {exc.finder}; rank {launch.rank} stopped with it)"
            )
            return Outcome(ExitCode.USAGE)
        except CollectiveFailure as exc:
            say(f"commbench: {exc}", err=True)
            tell_launcher(f"commbench: {exc}")
            return Outcome(ExitCode.COLLECTIVE_FAILURE)
    except KeyboardInterrupt as exc:  # rows are written as they complete: nothing to save, just stop
        return Outcome(interrupted_code(exc))


def die_with_launcher() -> None:
    """Have Linux kill this rank if its launcher dies, so even `kill -9` of commbench leaves no orphans.

    The ranks run in their own sessions (a terminal's Ctrl-C goes to the launcher, which stops them
    in order), so nothing else would end them.
    """
    launcher = os.environ.get(LAUNCHER_PID_ENV)
    if launcher is None or not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGKILL))
    if os.getppid() != int(launcher):  # it died before the request took effect
        os._exit(ExitCode.INTERRUPTED)


def main() -> None:
    try:
        die_with_launcher()
        code = run_worker(SweepConfig.from_json(sys.stdin.read()), detect()).code
    except KeyboardInterrupt as exc:
        code = interrupted_code(exc)
    except Exception:  # a bug: keep its traceback, but never exit 1, which means wrong results
        traceback.print_exc()
        code = ExitCode.INTERNAL
    leave(code)


def leave(code: int) -> None:
    """Exit a spawned rank once its work is done, skipping the interpreter's teardown.

    By now every output is closed (the sink's CSV, samples file and history, in measure_session)
    and the process group destroyed (run_rank): what is left is freeing torch's modules and
    objects one by one, 0.5 to 2 s on a busy 2-core host, which the launcher waits for before
    it charts the run. Only what Python would still flush is flushed: the rank's two pipes."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a pipe the launcher closed: nothing left to tell it
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
