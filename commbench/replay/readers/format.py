"""What a trace format's reader is, for the list of them in commbench/replay/load.py: a new format
is one module that ends in its READER, and one line in that list."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from commbench.replay.readers.limits import Limits
from commbench.replay.record import Trace


@dataclass(frozen=True)
class Reader:
    """One trace format: its name ("kineto"), whether a file's first bytes are its (the first 4 KB
    of the content, inflated, without a UTF-8 BOM), and how one file is read: read(path, the rank the
    file's name gives where the format records none, the budgets); and what its files tell only
    together (every rank's traces of one job, by rank: a Flight Recorder group's members)."""

    name: str
    recognises: Callable[[bytes], bool]
    read: Callable[[Path, int | None, Limits], Trace]
    together: Callable[[list[Trace]], list[Trace]] = field(default=lambda traces: traces)
