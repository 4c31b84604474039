"""Issue 44, "Memory and time a small file can take": gzip bombs, the streaming reader's quadratic
shapes, and numbers in a trace that size what is built from them. Right: a wrong input refused in
one line (exit 2) within a budget of memory and time; a valid one read in linear time (the issue
lets a budget refuse a long string or a sea of whitespace, in one line)."""

from __future__ import annotations

import signal
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.hostile_inputs.case import EITHER, MEMORY, Case, Interrupt, Sizes, case, replay
from tests.support.hostile_inputs.checks import says
from tests.support.hostile_inputs.fixtures import (
    damaged_trace,
    edited_json,
    fr_document,
    fr_dump,
    fr_json_bomb,
    fr_pickle,
    fr_pickle_bomb,
    long_string_trace,
    shared_lists,
    small_trace,
    whitespace_trace,
)

GIB, MIB = 1 << 30, 1 << 20
# The tests' bombs inflate to 1 GiB (1 MB on disk): above any budget a dump of a few KB needs, so
# refused by the fixed readers as the are, yet made and refused in about a second.
BOMB = Sizes(GIB, 2 * GIB, "2 GiB inflated (2 MB gzipped, the issue's)")
DAMAGED = Sizes(32 * MIB, 200 * MIB, "200 MB (the issue's was 1 GiB: over 300 s and 2 GB)")


def bomb_in_folder(folder: Path, size: int) -> None:
    """traces/: rank 0's valid Flight Recorder dump, and rank 1's, a bomb."""
    (folder / "traces").mkdir()
    fr_dump(folder / "traces" / "rank0.pkl")
    fr_pickle_bomb(folder / "traces" / "rank1.pkl.gz", size)


def huge_world(folder: Path, _size: int) -> None:
    """Ranks 0 and 1 of a job whose distributedInfo says world_size 10^12."""
    for rank in (0, 1):
        path = small_trace(folder / f"rank{rank}.json", rank=rank)
        edited_json(path, lambda d: d["distributedInfo"].update(world_size=10**12))


def huge_group(path: Path, _size: int) -> None:
    """small_trace whose groups say "Group size" 10^12 from rank 0, stride 1, and list no ranks."""
    small_trace(
        path, **{"Process Group Ranks": "[]", "Group size": 10**12, "Global rank start": 0, "Global rank stride": 1}
    )


def shared_sizes(path: Path, _size: int) -> None:
    """A Flight Recorder pickle whose first entry's input_sizes is shared_lists(60)."""
    fr_pickle(path, fr_document(entries=[{**fr_document()["entries"][0], "input_sizes": shared_lists(60)}]))


def asks_2_62(path: Path, _size: int) -> None:
    """A pickle of one BINBYTES8 opcode whose length is 2^62."""
    path.write_bytes(b"\x80\x04\x8e" + struct.pack("<Q", 1 << 62) + b".")


def _file(id: str, what: str, name: str, write: Callable[[Path, int], object], **more: Any) -> Case:
    """A case of one file, `name`, that write(path, size) makes and `replay name` reads."""
    return case(id, MEMORY, what, lambda folder, size: write(folder / name, size), replay(name), **more)


def _long_string(id: str, what: str, mb: int, variant_of: str = "") -> Case:
    """A trace with one string of mb MB (mb KB gzipped): the issue's 100 KB took 10.9 s, 300 KB 66 s."""
    sizes = Sizes(16 * MIB, mb * MIB, f"a {mb} MB string ({mb} KB gzipped, the issue's)")
    more: dict[str, Any] = {"exits": EITHER, "sizes": sizes, "ranks": True, "variant_of": variant_of}
    return _file(
        id, f"{what}: {mb} KB gzipped, {'10.9' if mb == 100 else '66'} s", "t.json.gz", long_string_trace, **more
    )


CASES = [
    _file(
        "bomb-fr-pickle",
        "a gzipped Flight Recorder pickle (2 MB) inflated whole, twice: 4.5 GB RSS",
        "rank0.pkl.gz",
        fr_pickle_bomb,
        sizes=BOMB,
    ),
    _file(
        "bomb-fr-json",
        "a gzipped Flight Recorder JSON dump (2 MB): 6.5 GB RSS",
        "rank0.json.gz",
        fr_json_bomb,
        sizes=BOMB,
    ),
    _file(
        "bomb-fr-json-8m",
        "a gzipped Flight Recorder JSON dump of 8 MB: MemoryError under a 6 GB limit, about 16 GB without",
        "rank0.json.gz",
        fr_json_bomb,
        sizes=Sizes(GIB, 8 * GIB, "8 GiB inflated (8 MB gzipped, the issue's)"),
        variant_of="bomb-fr-json",
    ),
    case(
        "bomb-in-folder",
        MEMORY,
        "`replay traces/`: a valid dump and a bomb in one folder, the bomb inflated as above",
        bomb_in_folder,
        replay("traces/"),
        sizes=BOMB,
        checks=(says("rank1"),),
    ),
    _long_string(
        "long-string", "one long string value, re-parsed from its start at every 1 MiB: 100 KB gzipped, 10.9 s", 100
    ),
    _long_string("long-string-300k", "the same string three times as long: 300 KB gzipped, 66 s", 300, "long-string"),
    _file(
        "whitespace",
        "4 MB of gzipped whitespace inside traceEvents: not read in 300 s",
        "t.json.gz",
        whitespace_trace,
        exits=EITHER,
        sizes=Sizes(256 * MIB, 4 * GIB, "4 GiB of spaces (4 MB gzipped, the issue's)"),
        ranks=True,
    ),
    _file(
        "damaged-event",
        "one damaged event early in a large trace: the rest pulled into memory and re-parsed at every MiB",
        "t.json",
        damaged_trace,
        sizes=DAMAGED,
    ),
    _file(
        "ctrl-c-damaged",
        "Ctrl-C 2 s into the damaged trace's read: ignored for 117 s (1 GiB); right: 130, or 2 if refused before it",
        "t.json",
        damaged_trace,
        sizes=DAMAGED,
        interrupt=Interrupt(signal.SIGINT, after_s=2.0),
    ),
    _file(
        "ctrl-c-read",
        "Ctrl-C 2 s into a long read (the damaged trace is now refused at once): right, 130 at once",
        "t.json.gz",
        whitespace_trace,
        sizes=Sizes(GIB, 4 * GIB, "4 GiB of spaces (4 MB gzipped), a read of about a minute"),
        interrupt=Interrupt(signal.SIGINT, after_s=2.0),
    ),
    case(
        "world-size-huge",
        MEMORY,
        "distributedInfo.world_size 10^12 in two ranks' traces: set(range(world)), 16.9 GB in 44 s",
        huge_world,
        replay("rank0.json", "rank1.json"),
    ),
    _file(
        "group-size-huge",
        '"Group size" 10^12, a rank start and stride, no rank list: tuple(range(...)), a hang',
        "t.json",
        huge_group,
    ),
    _file(
        "fr-shared-lists",
        "a 1 KB Flight Recorder pickle whose input_sizes share lists (2^60 leaves): the count hangs",
        "rank0.pkl",
        shared_sizes,
    ),
    _file(
        "pickle-2-62",
        "a 12-byte pickle asking for 2^62 bytes (BINBYTES8): a MemoryError traceback",
        "rank0.pkl",
        asks_2_62,
    ),
]
