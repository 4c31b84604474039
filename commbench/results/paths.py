"""Where a run's files go: the default name of a results CSV, its --raw samples file, and the
checks that refuse an unusable --output before anything is measured."""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import stat
import time
from collections.abc import Callable, Iterable, Mapping
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


def env_path(path: Path) -> Path:
    """Where a run's host records live: <stem>.env.json beside its CSV."""
    path = Path(path)
    return path.with_name(path.stem + ".env.json")


def resolve_output(requested: str | None, backend: str, world_size: int, overwrite: bool, raw: bool) -> Path:
    """The CSV a run writes: the user's --output (a folder gets a fresh default name inside it), or
    a fresh default name in results/; refused when unusable, and so are the files written beside it
    (the .env.json, and the .raw.csv under --raw), before any rank starts."""
    path = output_path(requested, lambda folder: default_output(backend, world_size, folder or "results"))
    check_target(path, overwrite)
    refuse_busy(path)
    for beside in (env_path(path), *([raw_path(path)] if raw else [])):
        check_target(beside, overwrite)
    return path


def output_path(requested: str | Path | None, default: Callable[[Path | None], Path], flag: str = "--output") -> Path:
    """The file an --output option names. default(None) is the file when the option is left out;
    default(folder) the default name inside a folder, which is what a trailing slash or an existing
    folder asks for (`-o runs/`). An empty value is refused: it is a mistake, not a request for the
    default; so is `-`: commbench's table goes to stdout, its results to files, never both to one stream.
    """
    if requested is None:
        return default(None)
    text = str(requested)
    if not text.strip():
        raise UserError(f"{flag} is empty: give a file or folder name, or leave {flag} out for the default")
    if text == "-":
        raise UserError(
            f"{flag} - is not supported: the printed table goes to stdout, results to a file; give a file name"
        )
    path = Path(text)
    if text.endswith(("/", os.sep)) or target_kind(path, flag) == "folder":
        if target_kind(path, flag) not in (None, "folder"):
            raise UserError(
                f"{flag} {text} names a folder, but {path} is a {target_kind(path, flag)}; give a folder or a file name"
            )
        return default(path)
    return path


def make_folder(folder: Path) -> None:
    """Create an output folder and its missing parents, except a new folder at the filesystem root:
    `-o /results/run.csv` for results/run.csv is a slip of the finger that root (in a container,
    often) would carry out. One line says what to do instead."""
    folder = Path(folder)
    missing = [f for f in (folder, *folder.parents) if target_kind(f, "the output folder") is None]
    if missing and (top := missing[-1]).is_absolute() and top.parent == Path(top.anchor):
        raise UserError(
            f"the output folder {folder} does not exist, and commbench creates no folder at the filesystem "
            f"root ({top}); create {top} first, or drop the leading / for a folder under this one"
        )
    if (kind := target_kind(folder, "the output folder")) not in (None, "folder"):
        raise UserError(f"the output folder {folder} is a {kind}; give a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create the output folder {folder}: {exc.strerror}") from None


def target_kind(path: Path, flag: str) -> str | None:
    """What is at path, following links: None (nothing), "file" (a regular file), "folder", or what
    else it is (a device, a FIFO, a socket); a name the system refuses (too long) is one line."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.islink(path):
            raise UserError(f"{flag} {path} is a symbolic link to nothing; remove it or give another name") from None
        return None
    except NotADirectoryError:
        raise UserError(f"{flag} {path}: cannot create the output folder: a part of its path is a file") from None
    except OSError as exc:
        raise UserError(f"{flag} {path}: {exc.strerror}; give another name") from None
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "folder"
    return "device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "FIFO" if stat.S_ISFIFO(mode) else "socket"


def check_target(path: Path, overwrite: bool, inputs: Iterable[Path] = (), flag: str = "--output") -> Path:
    """May a command write path? The one rule of every command that writes a file: the target is a
    regular file or a new name in a folder that exists or can be created; a folder, a device, a FIFO
    or a socket (or a link to one) is refused; an existing file is replaced only with --overwrite,
    and never when it is one of the command's own inputs. A new file is created and removed to be
    sure it can be (/proc is writable for root, yet holds no new file; a name can be too long)."""
    path = Path(path)
    kind = target_kind(path, flag)
    if kind == "folder":
        raise UserError(f"{flag} {path} is a folder; give a file name such as {path / 'run.csv'}")
    if kind not in (None, "file"):
        raise UserError(
            f"{flag} {path} is a {kind}, not a regular file: commbench writes only to files; give a file name"
        )
    if kind == "file":
        for given in inputs:
            with contextlib.suppress(OSError):
                if os.path.samefile(path, given):
                    raise UserError(f"{flag} {path} is one of this command's inputs; give another file name")
        if not overwrite:
            raise UserError(f"{path} already exists; choose another {flag.split()[0]} or pass --overwrite")
        if os.access(path, os.W_OK) and os.access(Path(os.path.realpath(path)).parent, os.W_OK | os.X_OK):
            return path
        if os.path.lexists(path):
            raise UserError(f"cannot write {path}: permission denied; choose another {flag.split()[0]}")
        # Gone since it was seen: another process's probe of the same name (the ranks of one job check
        # the same targets at once); a new name after all.
    make_folder(path.parent)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        os.unlink(path)
    except FileExistsError:  # made meanwhile by another process checking or writing the same target
        if not overwrite:
            raise UserError(f"{path} already exists; choose another {flag.split()[0]} or pass --overwrite") from None
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror}; choose another {flag.split()[0]}") from None
    return path


def refuse_busy(path: Path) -> None:
    """Refuse a results file another commbench run is writing now (its writer holds a lock on it:
    commbench/results/writer.py); a file nobody writes passes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise UserError(busy_message(path)) from None
    finally:
        os.close(fd)


def busy_message(path: Path) -> str:
    return f"{path} is being written by another commbench run right now; wait for it to end, or choose another --output"


def write_atomically(path: Path, data: bytes | str) -> Path:
    """Write a whole file under a temporary name in its folder, then rename it over path: an
    interrupted write (Ctrl-C, a full disk) leaves the old file, never a cut one in its place. A
    link to a file is written through (the link stays a link). A full disk is said as such."""
    path = Path(path)
    real = Path(os.path.realpath(path))
    tmp = real.with_name(f".{real.name[:200]}.{secrets.token_hex(4)}.tmp")
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, real)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise UserError(f"cannot write {path}: {exc.strerror}{_kept(path)}") from None
    return path


def _kept(path: Path) -> str:
    return f" ({path} is left as it was)" if path.exists() else ""
