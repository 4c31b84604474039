"""What one trace file may cost to read: the budgets every reader holds a file to, so that no file (a
gzip bomb, a trace of nothing but tiny events, a pickle that asks for 2^62 bytes) can take the host's
memory or hours of its time. A file over a budget is refused in one line naming the file, the budget
and the `--trace-limit` that raises it; docs/replay.md lists them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

from commbench.errors import UserError
from commbench.units import format_size, parse_count, parse_size

OPTION = "--trace-limit"


@dataclass(frozen=True)
class Limits:
    """The budgets of one trace file. The defaults are far above any real job's trace (a 502 MB
    Kineto trace holds 2.6 million events and 1,285 collectives; a Flight Recorder dump a few MB)."""

    # bytes a streamed trace (Kineto, Execution Trace, Flight Recorder JSON) may inflate to: about
    # 5 minutes of reading; memory does not grow with it (the readers stream)
    bytes: int = 16 << 30
    # bytes a pickled Flight Recorder dump may inflate to: a pickle is loaded whole, and its objects
    # take up to about 30 times its bytes
    pickle_bytes: int = 64 << 20
    # events (Kineto), nodes (Execution Trace) or entries (Flight Recorder) in one file, and list
    # elements a pickled dump's fields expand to (a list shared n times counts n times)
    events: int = 100_000_000
    # list elements the fields a reader reads of a pickled dump expand to (a list shared n times
    # counts n times): a 770-byte pickle can share its lists into 2^60 leaves. A dump's entry holds
    # about 10, so this is several times what a dump at the pickle-bytes budget holds; about a second
    elements: int = 2_000_000
    # collectives (and their kernels, annotations and steps) one file may hold: the readers keep each
    # (about 1 KB), so this bounds their memory
    collectives: int = 1_000_000
    # the JSON text of one event, node or entry (or of one top-level value): no real one is larger
    # (distributedInfo of a 100,000-rank job is about 3 MB); reading one takes up to 7 times it in memory
    event_bytes: int = 8 << 20

    def over(self, path: object, name: str, what: str) -> UserError:
        """The refusal of a file over the budget `name` (a field); `what` says what it holds, "{}"
        standing for the budget ("inflates to more than {}")."""
        key, value = name.replace("_", "-"), getattr(self, name)
        sized = name.endswith("bytes")
        shown, larger = (format_size(value), format_size(4 * value)) if sized else (f"{value:,}", str(4 * value))
        return UserError(
            f"{path}: {what.format(shown)} (the {key} budget); if the trace is genuine, raise it: "
            f"{OPTION} {key}={larger}"
        )


LIMITS = Limits()
_KEYS = {f.name.replace("_", "-"): f.name for f in fields(Limits)}


def parse_limits(given: Sequence[str]) -> Limits:
    """The budgets `--trace-limit NAME=VALUE` (repeatable) sets over the defaults: bytes=64G, events=1e9."""
    limits = LIMITS
    for item in given:
        key, sep, value = str(item).partition("=")
        name = _KEYS.get(key.strip().lower())
        if not sep or name is None:
            raise UserError(
                f"{OPTION} {item!r}: give NAME=VALUE with NAME one of {', '.join(_KEYS)} (e.g. {OPTION} bytes=64G)"
            )
        number = parse_size(value) if name.endswith("bytes") else parse_count(value, f"{OPTION} {key.strip()}")
        limits = replace(limits, **{name: number})
    return limits


class Tally:
    """A count held to one budget of Limits: add() refuses the file in one line once it passes it."""

    def __init__(self, limits: Limits, name: str, path: object, what: str) -> None:
        self.limits, self.name, self.path, self.what = limits, name, path, what
        self.budget = getattr(limits, name)
        self.n = 0

    def add(self, n: int = 1) -> None:
        self.n += n
        if self.n > self.budget:
            raise self.limits.over(self.path, self.name, self.what)
