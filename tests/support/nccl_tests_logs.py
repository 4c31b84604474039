"""The real nccl-tests logs of tests/data/nccl-tests (its README names each one's source), and
copies of them with their modification time set: a log records no time, so a run read from one
is dated by its file."""

from __future__ import annotations

import datetime
import os
import shutil
from pathlib import Path

DATA = Path(__file__).parents[1] / "data" / "nccl-tests"
RS_FEC = "dgx-spark-rs-fec.log"  # Avg bus bandwidth 21.40 GB/s
NO_FEC = "dgx-spark-no-fec.log"  # the same nodes and command: 2.82 GB/s
CONFIG_A = tuple(f"exp1-config-a-default-rep{i}.log" for i in (1, 2, 3))
CONFIG_B = "exp1-config-b-nthreads4-rep1.log"


def copied(folder: Path, name: str, when: str = "2026-03-10 10:00:00", as_name: str | None = None) -> Path:
    """tests/data/nccl-tests/NAME copied into folder (as AS_NAME), its modification time `when`."""
    target = folder / (as_name or name)
    shutil.copyfile(DATA / name, target)
    stamp = datetime.datetime.fromisoformat(when).timestamp()
    os.utime(target, (stamp, stamp))
    return target


def text(name: str) -> str:
    return (DATA / name).read_text()
