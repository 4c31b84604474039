"""Result files: the CSV schema, the default path, and an append-as-you-go writer.

Each row is written with one write() and fsync'd as soon as its measurement completes, so a crash,
a dead rank or Ctrl-C keeps every row measured before it; a row cut mid-line by a kill during its
write is named and left out by the readers (commbench/results/reader.py).
"""

from __future__ import annotations

import csv
import io
import os
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from commbench.errors import UserError
from commbench.results.stats import STAT_COLUMNS

SCHEMA_VERSION = 2
# Versions the readers accept: version 1 lacks the interval and round columns, read as empty.
READABLE_VERSIONS = (1, 2)


def rank_hosts(node_ranks: str) -> list[str]:
    """The host of each rank listed in a node_ranks value (`0-7@gpu1/0;8@gpu2/1`: a range of
    consecutive ranks on one node, or one rank), in the order listed."""
    hosts: list[str] = []
    for entry in str(node_ranks or "").split(";"):
        ranks, at, place = entry.partition("@")
        if not at:
            continue
        first, _, last = ranks.partition("-")
        count = int(last) - int(first) + 1 if last else 1
        hosts += [place.split("/", 1)[0]] * count
    return hosts


# The tidy schema: one row per (op, variant, phase, dtype, mode, size). docs/csv-schema.md explains each column.
COLUMNS = (
    *"schema_version run_id timestamp".split(),
    *"op variant phase dtype mode size_bytes count world_size group group_size backend api calls".split(),
    *"iters warmup window rounds timer".split(),
    *STAT_COLUMNS,
    "time_us_p50_rounds",
    *"algbw_gbps busbw_gbps wrong status note".split(),
    *"comm_us compute_us overlapped_us overlap compute_flops".split(),  # --overlap only
    *"hosts node_ranks torch_version backend_version commbench_version command".split(),
    *"fingerprint env_file".split(),  # the run's fingerprint and its hosts' <stem>.env.json (docs/history.md)
)
KEY_COLUMNS = ("op", "variant", "phase", "dtype", "mode", "size_bytes")
RAW_COLUMNS = ("run_id", *KEY_COLUMNS, "round", "iteration", "rank", "time_us")
RAW_COLUMNS_V1 = tuple(c for c in RAW_COLUMNS if c != "round")


def run_tag(env: Mapping[str, str] | None = None) -> str:
    """What makes a default name this run's own: SLURM's job id (the array job and task ids for an
    array task) when there is one, then a random tag. The timestamp alone has 1-second resolution,
    and the tasks of a SLURM array, or two runs started by one script, start in the same second."""
    env = os.environ if env is None else env
    tag = secrets.token_hex(3)
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        return f"job{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}-{tag}"
    if env.get("SLURM_JOB_ID"):
        return f"job{env['SLURM_JOB_ID']}-{tag}"
    return tag


def default_output(backend: str, world_size: int, folder: str | Path = "results") -> Path:
    """results/<timestamp>-<backend>-n<world>-<tag>.csv (run_tag()), with a numeric suffix rather
    than reuse of a name."""
    stem = f"{time.strftime('%Y%m%d-%H%M%S')}-{backend}-n{world_size}-{run_tag()}"
    path = Path(folder) / f"{stem}.csv"
    suffix = 2
    while path.exists():
        path = Path(folder) / f"{stem}-{suffix}.csv"
        suffix += 1
    return path


def raw_path(path: Path) -> Path:
    return path.with_name(path.stem + ".raw.csv")


def resolve_output(requested: str | None, backend: str, world_size: int, overwrite: bool, raw: bool) -> Path:
    """The CSV a run writes: the user's --output (a folder gets a fresh default name inside it), or
    a fresh default name in results/; refused when unusable."""
    path = output_path(requested, lambda folder: default_output(backend, world_size, folder or "results"))
    check_writable(path, overwrite)
    if raw:
        check_writable(raw_path(path), overwrite)
    return path


def output_path(requested: str | Path | None, default: Callable[[Path | None], Path], flag: str = "--output") -> Path:
    """The file an --output option names. default(None) is the file when the option is left out;
    default(folder) the default name inside a folder, which is what a trailing slash or an existing
    folder asks for (`-o runs/`). An empty value is refused: it is a mistake, not a request for the default.
    """
    if requested is None:
        return default(None)
    text = str(requested)
    if not text.strip():
        raise UserError(f"{flag} is empty: give a file or folder name, or leave {flag} out for the default")
    path = Path(text)
    if text.endswith(("/", os.sep)) or path.is_dir():
        if path.exists() and not path.is_dir():
            raise UserError(f"{flag} {text} names a folder, but {path} is a file; give a folder or a file name")
        return default(path)
    return path


def make_folder(folder: Path) -> None:
    """Create an output folder and its missing parents, except a new folder at the filesystem root:
    `-o /results/run.csv` for results/run.csv is a slip of the finger that root (in a container,
    often) would carry out. One line says what to do instead."""
    folder = Path(folder)
    missing = [f for f in (folder, *folder.parents) if not f.exists()]
    if missing and (top := missing[-1]).is_absolute() and top.parent == Path(top.anchor):
        raise UserError(
            f"the output folder {folder} does not exist, and commbench creates no folder at the filesystem "
            f"root ({top}); create {top} first, or drop the leading / for a folder under this one"
        )
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create the output folder {folder}: {exc.strerror}") from None


def check_writable(path: Path, overwrite: bool) -> None:
    """Refuse an existing file (unless asked), a folder that cannot be created, and a file that
    cannot be created there: a file is created and removed to be sure (/proc is writable for root,
    yet holds no new file)."""
    if path.is_dir():
        raise UserError(f"--output {path} is a folder; give a file name such as {path / 'run.csv'}")
    if path.exists() and not overwrite:
        raise UserError(f"{path} already exists; choose another --output or pass --overwrite")
    make_folder(path.parent)
    try:
        if path.exists():  # --overwrite: opening to append changes nothing
            path.open("a").close()
        else:
            path.open("x").close()
            path.unlink()
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror}; choose another --output") from None


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
