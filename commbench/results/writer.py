"""Writing result CSVs: an append-as-you-go writer and the text of a cell.

Each row is written with one write() and fsync'd as soon as its measurement completes, so a crash,
a dead rank or Ctrl-C keeps every row measured before it; a row cut mid-line by a kill during its
write is named and left out by the readers (commbench/results/reader.py).
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from commbench.errors import UserError
from commbench.results.schema import COLUMNS


class CsvAppender:
    """A CSV file that gains one complete, durable line per write()."""

    def __init__(self, path: Path, columns: Iterable[str], overwrite: bool = True) -> None:
        self.path = Path(path)
        self.columns = tuple(columns)
        try:
            # "x" creates or fails: a file that appeared after check_writable (another run picked the
            # same name) is refused here rather than truncated.
            self._file = open(self.path, "w" if overwrite else "x", newline="", encoding="utf-8")  # noqa: SIM115 (closed by close())
        except FileExistsError:
            raise UserError(f"{self.path} already exists; choose another --output or pass --overwrite") from None
        except OSError as exc:
            raise UserError(f"cannot write {self.path}: {exc.strerror}; choose another --output") from None
        self._emit([self.columns])

    def write(self, row: dict[str, Any]) -> None:
        self.write_many([row])

    def write_many(self, rows: Iterable[dict[str, Any]]) -> None:
        self._emit([[_cell(row.get(c)) for c in self.columns] for row in rows])

    def _emit(self, lines: list[list[Any]]) -> None:
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(lines)
        self._file.write(buf.getvalue())
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


def cells(row: dict[str, Any], columns: Iterable[str] = COLUMNS) -> dict[str, Any]:
    """A row as the CSV writes it: one cell per column, '' where empty, floats to 6 significant digits."""
    return {c: _cell(row.get(c)) for c in columns}


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}" if value == value else ""
    return value
