"""Entry point of one rank: `python -m commbench.worker` with COMMBENCH_CONFIG in the environment.

The same run_worker() serves ranks started by torchrun (in-process) and by commbench's spawner.
"""

from __future__ import annotations

import os
import sys

from commbench.config import SweepConfig
from commbench.errors import UserError

CONFIG_ENV = "COMMBENCH_CONFIG"
INTERRUPTED_EXIT_CODE = 130


def run_worker(cfg: SweepConfig) -> int:
    """Run this rank and turn every expected failure into one line and an exit code."""
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
        return 3
    except KeyboardInterrupt:
        return INTERRUPTED_EXIT_CODE


def main() -> None:
    sys.exit(run_worker(SweepConfig.from_json(os.environ[CONFIG_ENV])))


if __name__ == "__main__":
    main()
