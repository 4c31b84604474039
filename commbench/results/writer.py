"""Writing result CSVs: an append-as-you-go writer and the text of a cell.

Each row is written with one write() and fsync'd as soon as its measurement completes, so a crash,
a dead rank or Ctrl-C keeps every row measured before it; a row cut mid-line by a kill during its
write is named and left out by the readers (commbench/results/reader.py). A results file has one
writer at a time: the writer holds an exclusive lock on it (flock) while it writes, and a second run
given the same --overwrite file is refused rather than interleaving its rows. A full disk ends the
writer with one line saying so, the rows written before it kept.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import fcntl
import io
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from commbench.errors import UserError
from commbench.results.paths import busy_message
from commbench.results.schema import COLUMNS


class CsvAppender:
    """A CSV file that gains one complete, durable line per write()."""

    def __init__(self, path: Path, columns: Iterable[str], overwrite: bool = True, append: bool = False) -> None:
        self.path = Path(path)
        self.columns = tuple(columns)
        self.lines = 0  # data lines written, for the line a full disk ends with
        # append: a later launch of `sweep --repeat` adds its rows to the file the first one created.
        self._fd: int | None = _locked(self.path, overwrite, append)
        self._size = os.lseek(self._fd, 0, os.SEEK_END)  # bytes of complete lines: a cut write is taken back to it
        if not append:
            self._emit([self.columns])
        self.lines = 0

    def write(self, row: dict[str, Any]) -> None:
        self.write_many([row])

    def write_many(self, rows: Iterable[dict[str, Any]]) -> None:
        self._emit([[_cell(row.get(c)) for c in self.columns] for row in rows])

    def _emit(self, lines: list[list[Any]]) -> None:
        if self._fd is None:
            raise ValueError(f"{self.path} is closed")
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(lines)
        view = memoryview(buf.getvalue().encode("utf-8"))
        try:
            while view:
                view = view[os.write(self._fd, view) :]
            os.fsync(self._fd)
        except OSError as exc:
            with contextlib.suppress(OSError):  # leave whole lines only
                os.ftruncate(self._fd, self._size)
            raise DiskFull(self.path, self.lines, exc) from None
        self._size = os.lseek(self._fd, 0, os.SEEK_CUR)
        self.lines += len(lines)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # the lock goes with it
            self._fd = None


class DiskFull(UserError):
    """A results file that can take no more rows (a full disk, a quota): one line that says so and
    where the rows written before it are, never a rank's failure."""

    def __init__(self, path: Path, lines: int, exc: OSError) -> None:
        why = "the disk is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else exc.strerror or str(exc)
        super().__init__(
            f"cannot write {path}: {why}; it keeps the {lines} row{'s' if lines != 1 else ''} written before: "
            "free space (or give --output on another disk) and run again"
        )


def _locked(path: Path, overwrite: bool, append: bool = False) -> int:
    """A descriptor of path open for writing, emptied and locked for this writer alone. A new file
    is created exclusively (a name another run took since it was checked is refused, not
    truncated); an existing one (--overwrite) is truncated only once its lock is held, so a run that
    another is writing is refused with its rows intact. Anything but a regular file is refused."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags if (overwrite or append) and path.exists() else flags | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError:
        raise UserError(f"{path} already exists; choose another --output or pass --overwrite") from None
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror}; choose another --output") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UserError(f"--output {path} is not a regular file: commbench writes only to files; give a file name")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(busy_message(path)) from None
        if not append:
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def cells(row: dict[str, Any], columns: Iterable[str] = COLUMNS) -> dict[str, Any]:
    """A row as the CSV writes it: one cell per column, '' where empty, floats to 6 significant digits."""
    return {c: _cell(row.get(c)) for c in columns}


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}" if value == value else ""
    return value
