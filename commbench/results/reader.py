"""Reading result CSVs back for charts, reports and comparisons.

Every way a file can be unusable (missing, empty, another tool's CSV, another schema version, the
--raw samples file given in place of the summary) is a one-line UserError naming what is wrong.
A file whose last row was cut mid-line (a run killed while writing it) is read without that row,
and one warning names it: a partial row is never a result.
pandas is imported here, so the CLI imports this module only inside the commands that need it.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from pathlib import Path

import click
import pandas as pd

from commbench.errors import UserError
from commbench.results.nccl_tests import is_nccl_tests, read_cells
from commbench.results.paths import raw_path
from commbench.results.schema import (
    CASE_KEY,
    COLUMNS,
    LAYOUT_KEY,
    RAW_COLUMNS,
    RAW_COLUMNS_V1,
    READABLE_VERSIONS,
    ROW_KEY,
    SCHEMA_VERSION,
)
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
    "fingerprint",
    "env_file",
)


def complete_records(text: str) -> tuple[str, int | None]:
    """The text up to the end of its last complete CSV record, and the line on which a partial last
    record starts (None when the text ends with a complete one).

    The writer ends every record with a newline and fsyncs it whole, so text after the last newline
    is a record a run was killed while writing. A newline inside a quoted cell does not end a
    record: it is one with an odd number of quotes before it (quotes inside cells are doubled).
    """
    quotes = text.count('"')
    end = len(text)
    while end > 0:
        if text.endswith("\n", 0, end) and (quotes - text.count('"', end)) % 2 == 0:
            break
        end = text.rfind("\n", 0, end - 1) + 1 if end > 1 else 0
    if end == len(text):
        return text, None
    return text[:end], text.count("\n", 0, end) + 1


def _read_csv(path: Path, what: str) -> pd.DataFrame:
    """One CSV as text cells; only empty cells become missing (a variant named 'NA' stays 'NA').

    A partial last row is left out with one warning; a file cut inside its header is refused."""
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
    if not text:
        raise UserError(f"{what} {path} is empty (0 bytes): the run wrote nothing; re-run it")
    text, partial_line = complete_records(text)
    if partial_line == 1:
        raise UserError(f"{what} {path} ends inside its header line: the run wrote no row; re-run it")
    if partial_line is not None:
        click.echo(f"commbench: warning: {path} ends in a partial row (line {partial_line}): ignored", err=True)
    try:
        return pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, na_values=[""])
    except pd.errors.EmptyDataError:
        raise UserError(f"{what} {path} is empty: the run wrote nothing; re-run it") from None
    except pd.errors.ParserError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{what} {path} is not a readable CSV: {first}") from None


def read_one(path: Path) -> pd.DataFrame:
    """One results CSV (or nccl-tests' JSON: commbench/results/nccl_tests.py), validated and typed
    (numbers as floats, text as str)."""
    path = Path(path)
    if is_nccl_tests(path):
        return typed(read_cells(path).replace("", pd.NA), str(path))
    frame = _read_csv(path, "results file")
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
        hint = " (not a commbench results CSV?)" if len(missing) > len(REQUIRED_COLUMNS) // 2 else ""
        raise UserError(f"{path} lacks required column(s) {', '.join(missing)}{hint}")
    if frame.empty:
        raise UserError(f"{path} holds a header but no rows: the run measured nothing")
    return typed(frame, str(path))


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
            frame[column] = pd.to_numeric(frame[column], errors="coerce")
    frame[ROUND_P50S] = frame["time_us_p50_rounds"].map(parse_rounds)  # parsed once, for every judge of a row
    frame["group_size"] = frame["group_size"].fillna(frame["world_size"])
    frame["source"] = source
    return frame


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
    return pd.concat(frames, ignore_index=True)


def read_samples(csv_path: Path, summary: pd.DataFrame | None = None) -> dict[tuple, list[float]] | None:
    """Per-iteration samples (the max over ranks, as the summary's statistics use) by row key.

    None when the run was measured without --raw. The world size and group come from the summary
    CSV (read_one's frame of it, when the caller has it), since the raw file does not repeat them.
    """
    path = raw_path(Path(csv_path))
    if not path.exists():
        return None
    raw = _read_csv(path, "raw samples file")
    missing = [c for c in RAW_COLUMNS_V1 if c not in raw.columns]  # version 1 has no round column
    if missing:
        raise UserError(f"{path} lacks raw-sample column(s) {', '.join(missing)}")
    summary = read_one(Path(csv_path)) if summary is None else summary
    runs = summary.groupby("run_id")
    raw["size_bytes"] = pd.to_numeric(raw["size_bytes"], errors="coerce")
    raw["time_us"] = pd.to_numeric(raw["time_us"], errors="coerce")
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


# The column typed() adds: time_us_p50_rounds as a tuple of floats, () where a row has no rounds.
ROUND_P50S = "round_p50s"


def parse_rounds(cell: object) -> tuple[float, ...]:
    """'812.5;790;845' -> (812.5, 790.0, 845.0); empty, missing or malformed cells give ()."""
    if not isinstance(cell, str) or not cell.strip():
        return ()
    try:
        values = tuple(float(v) for v in cell.split(";") if v.strip())
    except ValueError:
        return ()
    return values if all(v > 0 for v in values) else ()
