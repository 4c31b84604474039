"""Issue 44, "Wrong, silently" (the replay side; the importer's are in importer.py): traces of two
jobs accepted, absurd recorded times printed, paths that are no trace file misnamed, a BOM that
hides a valid trace, --nproc 0, and dtypes replayed without a word or failing mid-run."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.hostile_inputs.case import EITHER, READ, SILENT, Case, case, replay
from tests.support.hostile_inputs.checks import never_says, noted_when_run, says
from tests.support.hostile_inputs.fixtures import prefixed_trace, small_trace, timed_trace

# A duration no replay should print: nan or inf ms, a negative time, a number of 40 digits or more
# (a line that names what it dropped, "dropped: NaN, negative or over a day", prints none).
ABSURD = r"(?i)\b(?:nan|inf(?:inity)?) ?[mµu]?s\b|(?<![\w.])-\d[\d.]* ?[mµu]?s\b|\d{40}"
NOT_MISSING = never_says("no such file")


def two_jobs(folder: Path, _size: int) -> None:
    """Rank 0 of one job and rank 1 of another: the same world and backend, 4x the sizes."""
    small_trace(folder / "rank0.json")
    small_trace(folder / "rank1.json", rank=1, scale=4)


def fifo(folder: Path, _size: int) -> None:
    os.mkfifo(folder / "t.json")


def link_loop(folder: Path, _size: int) -> None:
    (folder / "a.json").symlink_to("b.json")
    (folder / "b.json").symlink_to("a.json")


def _timed(id: str, dur: float, what: str) -> Case:
    make = lambda folder, _size: timed_trace(folder / "t.json", dur)  # noqa: E731
    return case(
        id,
        SILENT,
        what,
        make,
        replay("t.json"),
        exits=EITHER,
        checks=(never_says(ABSURD, "no absurd duration"),),
        ranks=True,
    )


def _dtype(id: str, recorded: str, dtype: str, what: str) -> Case:
    make = lambda folder, _size: small_trace(folder / "t.json", dtype=recorded)  # noqa: E731
    return case(id, SILENT, what, make, replay("t.json"), exits=EITHER, checks=(noted_when_run(dtype),), ranks=True)


def _nproc(n: str) -> Case:
    make = lambda folder, _size: small_trace(folder / "t.json")  # noqa: E731
    what = f'`--nproc {n}` says "fit the groups onto {n}"'
    checks = (never_says(f"onto {n}"), says("--nproc"))
    return case(f"nproc-{n.replace('-', 'minus-')}", SILENT, what, make, replay("t.json", "--nproc", n), checks=checks)


CASES = [
    case(
        "two-jobs",
        SILENT,
        "rank 0 of one job, rank 1 of another (4x the sizes): accepted, rank 1's counts replaced by rank 0's",
        two_jobs,
        replay("rank0.json", "rank1.json"),
        ranks=True,
    ),
    _timed("dur-nan", float("nan"), "a recorded kernel time NaN: `in the trace nan ms`"),
    _timed("dur-negative", -150.0, "a recorded kernel time of -150 µs: `-0.150 ms`"),
    _timed("dur-1e300", 1e300, "a recorded kernel time of 1e300 µs: 300 digits"),
    case(
        "replay-empty-path",
        SILENT,
        "`replay ''` reads the current folder (here: it replays the trace in it)",
        lambda folder, _size: small_trace(folder / "t.json"),
        replay(""),
        ranks=True,
    ),
    case(
        "device",
        SILENT,
        '`replay /dev/zero`: "no such file or folder"',
        lambda *_: None,
        replay("/dev/zero"),
        checks=(NOT_MISSING,),
    ),
    case(
        "fifo",
        SILENT,
        'a FIFO given as the trace: "no such file or folder"',
        fifo,
        replay("t.json"),
        checks=(NOT_MISSING,),
    ),
    case(
        "symlink-loop",
        SILENT,
        'a symlink loop given as the trace: "no such file or folder"',
        link_loop,
        replay("a.json"),
        checks=(NOT_MISSING,),
    ),
    case(
        "utf8-bom",
        SILENT,
        'a valid trace with a UTF-8 BOM before it: "not a trace"',
        lambda folder, _size: prefixed_trace(folder / "t.json", "\ufeff"),
        replay("t.json"),
        exits=READ,
        ranks=True,
    ),
    _nproc("0"),
    _nproc("-1"),
    _dtype("dtype-int16", "Short", "int16", 'an int16 trace fails mid-run as "a transport error" (exit 3)'),
    _dtype("dtype-bool", "Bool", "bool", "a bool trace replayed without comment"),
    _dtype("dtype-int8", "Char", "int8", "an int8 trace replayed without comment"),
]
