"""Entry point of one rank: `python -m commbench.worker` with COMMBENCH_CONFIG in the environment.

The same run_worker() serves ranks started by torchrun (in-process) and by commbench's spawner.
"""

from __future__ import annotations

import os
import signal
import sys

from commbench.config import SweepConfig
from commbench.errors import UserError

CONFIG_ENV = "COMMBENCH_CONFIG"
LAUNCHER_PID_ENV = "COMMBENCH_LAUNCHER_PID"
WRONG_RESULTS_EXIT_CODE = 1
COLLECTIVE_FAILURE_EXIT_CODE = 3  # a collective failed or timed out, or a rank was lost
INTERRUPTED_EXIT_CODE = 130


def run_worker(cfg: SweepConfig) -> int:
    """Run this rank and turn every expected failure into one line and an exit code."""
    try:
        from commbench.runner import CollectiveFailure, PeerError, run_rank

        try:
            return run_rank(cfg)
        except UserError as exc:
            exc.show()
            return exc.exit_code
        except PeerError:
            return UserError.exit_code
        except CollectiveFailure as exc:
            print(f"commbench: {exc}", file=sys.stderr, flush=True)
            return COLLECTIVE_FAILURE_EXIT_CODE
    except KeyboardInterrupt:  # rows are written as they complete: nothing to save, just stop
        return INTERRUPTED_EXIT_CODE


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
        os._exit(INTERRUPTED_EXIT_CODE)


def main() -> None:
    try:
        die_with_launcher()
        code = run_worker(SweepConfig.from_json(os.environ[CONFIG_ENV]))
    except KeyboardInterrupt:
        code = INTERRUPTED_EXIT_CODE
    sys.exit(code)


if __name__ == "__main__":
    main()
