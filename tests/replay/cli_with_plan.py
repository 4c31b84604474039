"""`commbench` with the traces' reader replaced by a hand-built plan (tests/replay/plans.py), so the
replay command runs end to end before, and apart from, the readers: `python cli_with_plan.py PLAN ARGS...`."""

from __future__ import annotations

import sys

from commbench.replay import source
from tests.replay import plans


def main() -> None:
    plan = getattr(plans, sys.argv[1])()
    source.read_plan = lambda paths, *_: source.Source(plan, "nccl 2.17.1")
    from commbench.cli import main as commbench

    commbench(sys.argv[2:])


if __name__ == "__main__":
    main()
