"""Where a run's files go: the default name of a results CSV, its --raw samples file, and the
checks that refuse an unusable --output before anything is measured."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from commbench.errors import UserError


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
