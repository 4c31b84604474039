"""The traces a user gives `commbench replay`, read (commbench/replay/load.py) and mapped onto
commbench's ops (commbench/replay/mapping.py) into the Plan the ranks replay."""

from __future__ import annotations

from collections import Counter
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


def trace_paths(given: Sequence[str]) -> tuple[Path, ...]:
    """The trace paths as given on the command line. An empty one is refused here, while it is
    still "": as a Path it would be ".", the current folder."""
    if any(not str(p).strip() for p in given):
        raise UserError(
            "an empty path given as a trace: pass the trace files (or a folder of them) a PyTorch job wrote"
        )
    return tuple(Path(p) for p in given)


def read_plan(paths: Sequence[Path], trace_limits: Sequence[str] = ()) -> Source:
    """Read and map the traces, each file held to the budgets `--trace-limit NAME=VALUE` sets
    (readers/limits.py); every problem with them is a one-line UserError, a set of traces of which
    no collective can be replayed included."""
    try:
        from commbench.replay.load import load
        from commbench.replay.mapping import plan
        from commbench.replay.readers.limits import parse_limits
    except ImportError as exc:  # the readers ship with commbench; a partial install lacks them
        raise UserError(f"this commbench cannot read traces ({exc}); reinstall commbench") from None
    limits = parse_limits(trace_limits)
    traces = load([str(p) for p in paths], limits)
    backends = list(dict.fromkeys(t.backend for t in traces if t.backend))
    mapped = plan(traces)
    if not mapped.sequence:
        raise UserError(_nothing_to_replay(traces[0].path, mapped))
    return Source(mapped, ", ".join(backends), tuple(t.path for t in traces))


def _nothing_to_replay(path: str, p: Plan) -> str:
    reasons = Counter(u.reason for u in p.unmapped)
    said = "; ".join(f"{reason}: {n}" for reason, n in reasons.most_common(2))
    more = f"; and {len(reasons) - 2} other reason(s)" if len(reasons) > 2 else ""
    return (
        f"{path}: none of its {len(p.unmapped)} collective(s) can be replayed ({said}{more}); "
        "give the traces of steps that issue collectives commbench replays (docs/replay.md)"
    )
