"""A spawned rank has no CLI around it: its entry (launch/worker.py) shows the warnings of the layers
below as the CLI does, one `commbench: warning:` line each on stderr."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.distributed import REPO, commbench

# Each spawned rank names itself a host of its own; rank 1's host sets a transport variable rank 0's lacks.
SITECUSTOMIZE = """import os
if "RANK" in os.environ and os.environ.get("COMMBENCH_TEST_HOSTS"):
    os.environ["COMMBENCH_HOST"] = "host" + os.environ["RANK"]
    if os.environ["RANK"] == "1":
        os.environ["NCCL_IB_DISABLE"] = "1"
"""


@pytest.mark.slow
def test_a_spawned_rank_0_warns_in_one_line_like_the_cli(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = {"PYTHONPATH": f"{tmp_path}:{REPO}", "COMMBENCH_TEST_HOSTS": "1"}
    args = ["sweep", "--op", "all_gather", "--sizes", "8", "-n", "2", "-w", "1", "--no-plot"]
    done = commbench(*args, "-o", str(tmp_path / "a.csv"), env=env)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "commbench: warning: the hosts differ: host host1 has NCCL_IB_DISABLE=1, the other unset"
    ]
