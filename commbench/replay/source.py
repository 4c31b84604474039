"""The traces a user gives `commbench replay`, read (commbench/replay/load.py) and mapped onto
commbench's ops (commbench/replay/mapping.py) into the Plan the ranks replay."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from commbench.errors import UserError
from commbench.replay.record import Plan


@dataclass(frozen=True)
class Source:
    """The Plan, and what the traces say about the job that wrote them."""

    plan: Plan
    recorded_on: str  # the traced job's backend ("nccl 2.17.1"), "" where unrecorded
    files: tuple[str, ...] = ()  # the trace files read: the run's inputs, never one of its outputs


def read_plan(paths: Sequence[Path]) -> Source:
    """Read and map the traces; every problem with them is a one-line UserError from the readers."""
    try:
        from commbench.replay.load import load
        from commbench.replay.mapping import plan
    except ImportError as exc:  # the readers ship with commbench; a partial install lacks them
        raise UserError(f"this commbench cannot read traces ({exc}); reinstall commbench") from None
    traces = load([Path(p) for p in paths])
    backends = list(dict.fromkeys(t.backend for t in traces if t.backend))
    return Source(plan(traces), ", ".join(backends), tuple(t.path for t in traces))
