"""Which files commbench wrote: what `--overwrite` may replace.

`--overwrite` replaces a file only when an earlier run of commbench wrote it (or an empty file, the
claim a killed run left behind); anything else at an output's name is refused, with or without it.
Every kind of file commbench writes says so in its first bytes, and that is what is read here (at
most HEAD_BYTES of it, so a huge file costs nothing):

- a CSV: its header is one commbench writes (KNOWN_HEADERS, which the modules that write a CSV
  register), or a results CSV's, whose first column is `schema_version`;
- a JSON document: its first key is `written_by`, whose value starts with "commbench" (an
  environment record written before that key existed starts with its `format` and `run_id`);
- a chart: a PNG's `Software` text chunk, an SVG's creator, says commbench (render.py writes them);
- a report: its `generator` meta tag says commbench;
- a metrics file (.prom): its first line is the comment `# written by commbench`;
- a results history: a SQLite file whose schema (on its first page) holds commbench's `history_meta`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

WRITTEN_BY = "commbench"
HEAD_BYTES = 64 * 1024
# The key every JSON document commbench writes starts with: {"written_by": "commbench 0.1.0", ...}
JSON_MARK = "written_by"
HTML_GENERATOR = f"<meta name='generator' content='{WRITTEN_BY}'>"
PROM_MARK = f"# written by {WRITTEN_BY}"  # the first line of a metrics file (results/metrics.py): a comment

KNOWN_HEADERS: set[tuple[str, ...]] = set()

_JSON = re.compile(rb'\A(?:\xef\xbb\xbf)?\s*\{\s*"written_by"\s*:\s*"commbench')
_LEGACY_ENV = re.compile(rb'\A\s*\{\s*"format"\s*:\s*\d+\s*,\s*"run_id"\s*:')
_HISTORY_SCHEMA = b"CREATE TABLE history_meta"  # history/store.py's META table
_MARKS = (
    b"tEXtSoftware\x00" + WRITTEN_BY.encode(),  # PNG
    b"<dc:title>" + WRITTEN_BY.encode(),  # SVG (matplotlib writes the Creator as <dc:creator><cc:Agent><dc:title>)
    HTML_GENERATOR.encode(),
    PROM_MARK.encode(),  # a metrics file
)


def register_header(columns: Iterable[str]) -> tuple[str, ...]:
    """Say that commbench writes CSVs with this header (the module that writes one calls it once)."""
    header = tuple(columns)
    KNOWN_HEADERS.add(header)
    return header


def written_by_commbench(path: Path) -> bool:
    """Whether the regular file at path is one commbench wrote, or is empty."""
    try:
        with open(path, "rb", opener=_no_follow) as f:
            head = f.read(HEAD_BYTES)
    except OSError:
        return False
    if not head:
        return True
    if _JSON.match(head) or _LEGACY_ENV.match(head):
        return True
    if any(mark in head for mark in _MARKS):
        return True
    if head.startswith(b"SQLite format 3\x00"):
        return _HISTORY_SCHEMA in head
    return _csv_header(head)


def _csv_header(head: bytes) -> bool:
    line = head.split(b"\n", 1)[0].rstrip(b"\r")
    if not line or len(line) == len(head) == HEAD_BYTES:
        return False
    cells = tuple(line.decode("utf-8", "replace").split(","))
    return cells in KNOWN_HEADERS or cells[:2] == ("schema_version", "run_id")


def _no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK)
