"""Reading result CSVs back for charts, reports and comparisons.

Every way a file can be unusable (missing, empty, another tool's CSV, another schema version, the
--raw samples file given in place of the summary) is a one-line UserError naming what is wrong.
A file whose last row was cut mid-line (a run killed while writing it) is read without that row,
and one warning names it: a partial row is never a result.
pandas is imported here, so the CLI imports this module only inside the commands that need it.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from commbench.errors import UserError, warn
from commbench.redact import redact
from commbench.results import nccl_tests, nccl_tests_log
from commbench.results.paths import raw_path
from commbench.results.placements import PLACEMENT_PAIRS, PLACEMENT_VAR, placement_spread
from commbench.results.schema import (
    CASE_KEY,
    CHECKED_CELLS,
    COLUMNS,
    LAYOUT_KEY,
    RAW_COLUMNS,
    RAW_COLUMNS_V1,
    READABLE_VERSIONS,
    ROW_KEY,
    SCHEMA_VERSION,
)
from commbench.results.stats import HEADLINE_ROUNDS
from commbench.results.timing import PERF_COUNTER

# What charts, reports and compare actually use. A CSV that has these reads even when the writer
# later grows optional columns; every other column of COLUMNS is filled in as empty when absent.
REQUIRED_COLUMNS = (
    "schema_version",
    "run_id",
    *CASE_KEY,
    "world_size",
    "backend",
    "time_us_min",
    "time_us_p50",
    "time_us_p95",
    "time_us_max",
    "time_us_std",
    "busbw_gbps",
    "status",
)
TEXT_COLUMNS = (
    "run_id",
    "op",
    "variant",
    "phase",
    "dtype",
    "mode",
    "backend",
    "group",
    "status",
    "note",
    "hosts",
    "node_ranks",
    "api",
    "timer",
    "torch_version",
    "backend_version",
    "commbench_version",
    "command",
    "timestamp",
    "time_us_p50_rounds",
    HEADLINE_ROUNDS,
    "fingerprint",
    "env_file",
    "launch_group",
)


@dataclass(frozen=True)
class Records:
    """A CSV's text split into records: the header line and its cells, each good row's text with
    the line it starts on, the malformed rows (line, why) and the line of a partial last row."""

    header_line: str
    header: list[str]
    rows: list[tuple[int, str]]
    malformed: list[tuple[int, str]]
    partial_line: int | None

    def good_text(self) -> str:
        """The header and the good rows: a CSV any parser reads whole."""
        return self.header_line + "".join(text for _, text in self.rows)


def split_records(text: str) -> Records:
    """The records of a CSV's text, each checked on its own, so that one bad row costs only itself.

    The writer ends every record with a newline and fsyncs it whole, so a last line without one is
    a record a run was killed while writing (partial). A newline inside a quoted cell does not end
    a record (an odd count of quotes so far: quotes inside cells are doubled); but a row cut inside
    a quoted cell in the middle of a file would swallow the rows after it, so a record built of
    several lines that does not come out as one row of the header's width is the first line's
    fault alone: that line is malformed and reading goes on at the next one.
    """
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]  # the text after the last newline ('' when it ends with one)
    if len(lines) == 1:
        return Records("", [], [], [], 1)
    header = next(csv.reader([lines[0]]), [])
    whole = _one_line_records(lines, header)
    if whole is not None:
        return whole
    rows: list[tuple[int, str]] = []
    malformed: list[tuple[int, str]] = []
    partial: int | None = None
    i = 1
    while i < len(lines):
        start, record = i, lines[i]
        i += 1
        while record.count('"') % 2 and i < len(lines):
            record += lines[i]
            i += 1
        if not record.strip():
            continue
        ended = record.endswith("\n") and record.count('"') % 2 == 0  # its quoted cells closed, then a newline
        width = _width(record)
        if width == len(header) and ended:
            rows.append((start + 1, record))
        elif i - start > 1 and any(_width(line) == len(header) for line in lines[start + 1 : i]):
            # An odd quote swallowed whole rows after it: the fault of its own line alone.
            malformed.append(
                (start + 1, f"a cut or malformed row ({_width(lines[start])} cells; the header has {len(header)})")
            )
            i = start + 1
        elif not ended:
            partial = start + 1
        else:
            malformed.append((start + 1, f"a cut or malformed row ({width} cells; the header has {len(header)})"))
    return Records(lines[0], header, rows, malformed, partial)


def _one_line_records(lines: list[str], header: list[str]) -> Records | None:
    """split_records' answer for the usual file, where every line holds an even count of quotes:
    each record is then one line, and its cells are counted without the csv module where its quoted
    cells are well formed (_plain_width). None (split_records reads it line by line) when any line
    holds an odd count."""
    if any(line.count('"') % 2 for line in lines):
        return None
    width = len(header)
    rows: list[tuple[int, str]] = []
    malformed: list[tuple[int, str]] = []
    partial: int | None = None
    for i in range(1, len(lines)):
        record = lines[i]
        if not record.strip():
            continue
        if not record.endswith("\n"):  # only the last line can lack one: a row the run was killed writing
            partial = i + 1
            continue
        cells = _plain_width(record)
        if cells is None:
            cells = _width(record)
        if cells == width:
            rows.append((i + 1, record))
        else:
            malformed.append((i + 1, f"a cut or malformed row ({cells} cells; the header has {width})"))
    return Records(lines[0], header, rows, malformed, partial)


def _plain_width(line: str) -> int | None:
    """The cells of one line ending in a newline, counted as the csv module does, where every quote
    opens a cell at its start, closes it before a comma or the newline, or is doubled inside it;
    None for any other line (_width asks the csv module). Between the quotes lie the parts outside
    every quoted cell: their commas, and only theirs, end cells."""
    if '"' not in line:
        return line.count(",") + 1
    outside = line.split('"')[0::2]
    first, *middle, last = outside
    if first and not first.endswith(","):
        return None
    if any(part and not (part[0] == "," and part[-1] == ",") for part in middle):
        return None
    if not (last == "\n" or last.startswith(",")) or any("\r" in part for part in outside):
        return None
    return sum(part.count(",") for part in outside) + 1


def _width(record: str) -> int:
    """The cells a record holds, read on its own (-1: more than one record)."""
    if '"' not in record:  # most rows: no quoted cell, so every comma ends one
        return record.count(",") + 1 if record.strip() else 0
    parsed = list(csv.reader(io.StringIO(record)))
    return len(parsed[0]) if len(parsed) == 1 else -1


def _read_csv(path: Path, what: str) -> tuple[pd.DataFrame, list[int]]:
    """One CSV as text cells (only empty cells become missing: a variant named 'NA' stays 'NA'),
    and the line each row starts on. A partial last row and each malformed row are left out, with
    one warning each; the frame's attrs["skipped"] counts them. A file cut inside its header is refused."""
    if not path.exists():
        raise UserError(f"{what} {path} does not exist")
    if path.is_dir():
        raise UserError(f"{what} {path} is a folder; give the CSV file inside it")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{what} {path} is not a readable CSV: {exc}") from None
    except OSError as exc:
        raise UserError(f"cannot read {what} {path}: {exc.strerror}") from None
    if not text.strip():
        raise UserError(f"{what} {path} is empty (0 bytes): the run wrote nothing; re-run it")
    records = split_records(text)
    if records.partial_line == 1:
        raise UserError(f"{what} {path} ends inside its header line: the run wrote no row; re-run it")
    if len(set(records.header)) != len(records.header) or not all(records.header):
        raise UserError(f"{what} {path} is not a readable CSV: its header repeats a column or has an empty one")
    notes = [f"{path} line {line}: {why}: skipped" for line, why in records.malformed[:MAX_NAMED]]
    if len(records.malformed) > MAX_NAMED:
        notes.append(f"{path}: {len(records.malformed) - MAX_NAMED} more cut or malformed rows skipped")
    if records.partial_line is not None:
        notes.append(f"{path} ends in a partial row (line {records.partial_line}): ignored")
    frame = pd.read_csv(io.StringIO(records.good_text()), dtype=str, keep_default_na=False, na_values=[""])
    frame.attrs["skipped"] = len(records.malformed) + (records.partial_line is not None)
    frame.attrs["skipped_notes"] = notes  # said by the caller once the header is known good (_say_skipped)
    return frame, [line for line, _ in records.rows]


def _say_skipped(frame: pd.DataFrame) -> None:
    """The rows _read_csv left out, one warning each: only for a file whose header is a results
    file's, so that a file that is no CSV of ours gets its one line and no list of its rows."""
    for note in frame.attrs.pop("skipped_notes", []):
        warn(note)


MAX_NAMED = 5  # rows named one by one per file; the rest are counted


def numbers(column: pd.Series) -> pd.Series:
    """pd.to_numeric(column, errors="coerce"), each distinct cell converted once where cells repeat
    (a run writes its iters, world size and versions on every row): the same values and dtype."""
    if pd.unique(column.iloc[:1000]).size * 4 > min(len(column), 1000):  # mostly distinct (times): nothing repeats
        return pd.to_numeric(column, errors="coerce")
    codes, distinct = pd.factorize(column)
    values = pd.to_numeric(pd.Series(distinct, dtype=object), errors="coerce").to_numpy()
    if (codes < 0).any():  # empty cells (code -1: the NaN appended last), so float as to_numeric makes it
        values = np.append(values.astype(float), np.nan)
    return pd.Series(values[codes], index=column.index, name=column.name)


def impossible_cells(frame: pd.DataFrame) -> list[tuple[int, str, str]]:
    """(row position, column, why) for the first impossible cell of each row (CHECKED_CELLS): a time
    that is not a finite positive number, a size that is not a whole number of bytes, NaN, inf."""
    found: dict[int, tuple[str, str]] = {}
    for column, rule in CHECKED_CELLS.items():
        if column not in frame.columns:
            continue
        text = frame[column]
        given = text.notna()
        value = numbers(text).astype(float)
        bad_number = given & ~np.isfinite(value)
        low = (value < rule.smallest) if rule.inclusive else (value <= rule.smallest)
        out_of_range = given & ~bad_number & (low | (value > rule.largest))
        fraction = given & ~bad_number & rule.whole & (value % 1 != 0)
        for position in np.flatnonzero((bad_number | out_of_range | fraction).to_numpy()):
            if position not in found:
                found[position] = (column, f"{text.iloc[position]!r} is not {rule.meaning}")
    return sorted((p, c, why) for p, (c, why) in found.items())


def read_cells(path: Path) -> pd.DataFrame:
    """One results CSV, validated, as text cells ('' where empty): the rows every reader (and
    `history import`) takes. attrs["skipped"] counts the rows left out (cut, malformed, impossible)."""
    frame = _validated(Path(path))
    skipped = frame.attrs["skipped"]
    frame = frame.fillna("")
    frame.attrs["skipped"] = skipped
    return frame


JSON, LOG, CSV = "nccl-tests -J file", "nccl-tests log", "results CSV"


def source_kind(path: Path) -> str:
    """What a file given where results are expected holds, by its content (JSON, LOG or CSV): a
    name ending in .json, or a first character `{` (nccl-tests names its -J file results.json.0
    when results.json exists), is nccl-tests' JSON; nccl-tests' text output is recognised by its
    header lines (commbench/results/nccl_tests_log.py), whatever its name (.log, .txt, none);
    anything else is read as a CSV, whose reader says what is wrong with it."""
    path = Path(path)
    if path.suffix.lower() == ".json":
        return JSON
    try:
        with path.open("rb") as file:
            head = file.read(_HEAD_BYTES)
    except OSError:
        return CSV  # missing, a folder, unreadable: the CSV reader names it
    if head.lstrip()[:1] == b"{":
        return JSON
    header = head.split(b"\n", 1)[0].decode("utf-8", "replace").split(",")
    if "run_id" in header or "schema_version" in header:
        return CSV
    return LOG if nccl_tests_log.looks_like_log(path) else CSV


_HEAD_BYTES = 65536  # enough for a CSV's header line and the start of a JSON document


def nccl_tests_cells(path: Path, kind: str) -> pd.DataFrame:
    """The text cells of an nccl-tests file of either kind (attrs["left_out"]: what was left out)."""
    return nccl_tests.read_cells(path) if kind == JSON else nccl_tests_log.read_cells(path)


def _validated(path: Path) -> pd.DataFrame:
    """read_cells' rows with empty cells missing (NaN), as typed() takes them."""
    kind = source_kind(path)
    if kind != CSV:  # nccl-tests' own output: its reader checks every field it uses
        cells = nccl_tests_cells(path, kind)
        left_out = cells.attrs["left_out"]
        return _usable(path, cells.replace("", pd.NA), left_out, len(left_out))
    frame, lines = _read_csv(path, "results file")
    columns = set(frame.columns)
    if columns in (set(RAW_COLUMNS), set(RAW_COLUMNS_V1)):
        raise UserError(
            f"{path} holds per-iteration samples (--raw); pass the summary CSV "
            f"{path.name.replace('.raw.csv', '.csv')} instead"
        )
    # The version is checked before the columns: another version may have renamed them. Version 1
    # lacks the p50's interval and the rounds; those columns read as empty.
    if "schema_version" in columns:
        versions = sorted({v for v in frame["schema_version"].dropna()})
        unknown = [v for v in versions if v not in {str(r) for r in READABLE_VERSIONS}]
        if unknown:
            readable = ", ".join(map(str, READABLE_VERSIONS))
            raise UserError(
                f"{path} has schema_version {', '.join(unknown)}; this commbench reads schema_version "
                f"{readable} (it writes {SCHEMA_VERSION}): read it with the commbench that wrote it"
            )
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        hint = (
            " (not a commbench results CSV, nor nccl-tests output?)"
            if len(missing) > len(REQUIRED_COLUMNS) // 2
            else ""
        )
        raise UserError(f"{path} lacks required column(s) {', '.join(missing)}{hint}")
    _say_skipped(frame)
    if frame.empty and not frame.attrs["skipped"]:
        raise UserError(f"{path} holds a header but no rows: the run measured nothing")
    impossible = impossible_cells(frame)
    left_out = [f"line {lines[position]}, column {column}: {why}: row left out" for position, column, why in impossible]
    if impossible:
        frame = frame.drop(index=frame.index[[p for p, _, _ in impossible]]).reset_index(drop=True)
    return _usable(path, frame, left_out, frame.attrs["skipped"] + len(impossible))


def _usable(path: Path, frame: pd.DataFrame, left_out: list[str], skipped: int) -> pd.DataFrame:
    """The rows kept, after one warning per row left out for an impossible value (MAX_NAMED of them
    named, the rest counted); a file none of whose rows is usable is refused."""
    for note in left_out[:MAX_NAMED]:
        warn(f"{path} {note}")
    if len(left_out) > MAX_NAMED:
        warn(f"{path}: {len(left_out) - MAX_NAMED} more rows with impossible values left out")
    if frame.empty:
        raise UserError(f"{path} holds no usable row ({skipped} cut, malformed or impossible: named above)")
    frame.attrs["skipped"] = skipped
    return frame


def read_one(path: Path) -> pd.DataFrame:
    """One results CSV, validated and typed (numbers as floats, text as str)."""
    return typed(_validated(Path(path)), str(Path(path)))


def typed(frame: pd.DataFrame, source: str) -> pd.DataFrame:
    """Cells read as text (a CSV's, or the history's) typed as the readers use them: every column of
    COLUMNS present (missing ones empty), numbers as floats, text as str; `source` says where from."""
    columns = set(frame.columns)
    for column in COLUMNS:
        if column not in columns:
            frame[column] = pd.NA
    frame["group"] = frame["group"].fillna("world")  # rows from before --group: every op ran on all ranks
    frame["timer"] = frame["timer"].fillna(PERF_COUNTER)  # rows from before the column: the host clock timed them
    for column in frame.columns:
        if column in TEXT_COLUMNS:
            frame[column] = frame[column].fillna("").astype(str)
        elif column in COLUMNS:
            frame[column] = numbers(frame[column])
    frame[ROUND_P50S] = _each_distinct(frame["time_us_p50_rounds"], parse_rounds)  # parsed once, for every judge
    frame[ROUND_MEANS] = _each_distinct(frame[HEADLINE_ROUNDS], parse_rounds)
    frame[PLACEMENT_VAR], frame[PLACEMENT_PAIRS] = placement_spread(frame)  # nccl-tests' rows' own noise
    frame["group_size"] = frame["group_size"].fillna(frame["world_size"])
    # A file written before commands were redacted may hold a password: no report or chart shows it.
    frame["command"] = _each_distinct(frame["command"], redact)
    frame["source"] = source
    return frame


def _each_distinct(column: pd.Series, function: Callable[[str], object]) -> pd.Series:
    """function of each cell, computed once per distinct cell: a run repeats its command on every row."""
    codes, distinct = pd.factorize(column, use_na_sentinel=False)
    values = np.empty(len(distinct), dtype=object)  # filled one by one: a tuple is one cell, not a row of cells
    values[:] = [function(cell) for cell in distinct]
    return pd.Series(values[codes], index=column.index, dtype=object)


def read_results(paths: Iterable[Path]) -> pd.DataFrame:
    """Several results CSVs as one frame with a `run` column naming where each row came from.

    `run` is the file's stem (with its folder when two files share a stem), and also the run_id
    when one file holds several runs, so each (backend, variant, run) can be a line on a chart.
    """
    paths = [Path(p) for p in paths]
    if not paths:
        raise UserError("no results file given: pass one or more CSVs written by `commbench sweep`")
    frames = [read_one(p) for p in paths]
    stems = [p.stem for p in paths]
    for path, frame in zip(paths, frames):
        label = path.stem if stems.count(path.stem) == 1 else f"{path.parent.name}/{path.stem}"
        run_ids = frame["run_id"].unique()
        frame["run"] = label if len(run_ids) == 1 else label + ":" + frame["run_id"]
    joined = pd.concat(frames, ignore_index=True)
    joined.attrs["skipped"] = sum(f.attrs.get("skipped", 0) for f in frames)
    return joined


def read_samples(csv_path: Path, summary: pd.DataFrame | None = None) -> dict[tuple, list[float]] | None:
    """Per-iteration samples (the max over ranks, as the summary's statistics use) by row key.

    None when the run was measured without --raw. The world size and group come from the summary
    CSV (read_one's frame of it, when the caller has it), since the raw file does not repeat them.
    """
    path = raw_path(Path(csv_path))
    if not path.exists():
        return None
    raw, _ = _read_csv(path, "raw samples file")
    _say_skipped(raw)
    missing = [c for c in RAW_COLUMNS_V1 if c not in raw.columns]  # version 1 has no round column
    if missing:
        raise UserError(f"{path} lacks raw-sample column(s) {', '.join(missing)}")
    summary = read_one(Path(csv_path)) if summary is None else summary
    runs = summary.groupby("run_id")
    raw["size_bytes"] = pd.to_numeric(raw["size_bytes"], errors="coerce")
    raw["time_us"] = pd.to_numeric(raw["time_us"], errors="coerce")
    impossible = ~(np.isfinite(raw["time_us"]) & (raw["time_us"] > 0))
    if impossible.any():  # a sample that is no time: left out of the tests the samples feed
        warn(f"{path}: {int(impossible.sum())} samples whose time_us is not a finite positive number left out")
        raw = raw[~impossible]
    for column in LAYOUT_KEY:  # the run's, the same on each of its rows
        raw[column] = raw["run_id"].map(runs[column].first().to_dict())
    per_iteration = raw.groupby([*ROW_KEY, "iteration"], dropna=False)["time_us"].max()
    samples: dict[tuple, list[float]] = {}
    for key, value in per_iteration.items():
        samples.setdefault(tuple(key[:-1]), []).append(float(value))
    return samples


def ok_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows with a trustworthy measurement: neither unavailable nor with wrong results."""
    return frame[(frame["status"] == "ok") & frame["time_us_p50"].notna()]


# The columns typed() adds: time_us_p50_rounds and time_us_mean_rounds as tuples of floats, () where
# a row has no rounds.
ROUND_P50S = "round_p50s"
ROUND_MEANS = "round_means"


def parse_rounds(cell: object) -> tuple[float, ...]:
    """'812.5;790;845' -> (812.5, 790.0, 845.0); empty, missing or malformed cells give ()."""
    if not isinstance(cell, str) or not cell.strip():
        return ()
    try:
        values = tuple(map(float, cell.split(";")))
    except ValueError:  # an empty part ('812;;790') is skipped; anything else that is no number gives ()
        try:
            values = tuple(float(v) for v in cell.split(";") if v.strip())
        except ValueError:
            return ()
    return values if all(v > 0 for v in values) else ()
