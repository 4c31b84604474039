"""`commbench replay` through the CLI on 2 Gloo ranks with its own spawner, each rank's issued steps
captured inside it (tests/replay/capture/sitecustomize.py): what the replay tests compare with what
a recorded job issued."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commbench.replay.summary import read_replay
from tests.support.distributed import REPO, commbench

CAPTURE = Path(__file__).resolve().parent / "capture"


@dataclass(frozen=True)
class Replayed:
    stdout: str
    ranks: list[dict[str, Any]]  # each rank's capture: {"steps": [{"calls", "comms"}...], "calls", "comms"}
    rows: list[dict[str, str]]  # the replay CSV's rows


def replay(traces: list[str], out: Path, *extra: str) -> Replayed:
    """The CLI's replay of the traces on 2 Gloo ranks (asserted to succeed): stdout, captures, rows."""
    capture = out / "capture"
    capture.mkdir(parents=True)
    result = commbench(
        "replay", *traces, "--nproc", "2", "--backend", "gloo", "--iters", "2", "--warmup", "1",
        "--rounds", "1", "-o", f"{out}/runs/", "--no-history", "--no-plot", *extra, timeout=600,
        env={"CAPTURE_REPLAY_DIR": str(capture), "PYTHONPATH": f"{CAPTURE}:{REPO}"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr + result.stdout
    ranks = [json.loads((capture / f"rank{r}.json").read_text()) for r in range(2)]
    (replay_csv,) = (out / "runs").glob("*.replay.csv")
    return Replayed(result.stdout, ranks, read_replay(replay_csv))
