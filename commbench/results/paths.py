"""Where a run's files go and the one rule every file a command writes obeys: the default name of a
results CSV, the names of the files beside it (one rule: `beside`), and the checks that refuse an
unusable target before anything is measured (commbench/results/outputs.py plans a run's targets
together: no two at one path, none an input, never the history).

The rule: a target is a regular file or a new name in a folder that exists or can be created; a
folder, a device, a FIFO, a socket or a symbolic link is refused (commbench writes through no
link: a link's target may be anything, a tracked README as well as a results file); an existing
file is replaced only with --overwrite, only when commbench wrote it (commbench/results/ownership.py),
and never when it is one of the command's inputs."""

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
from commbench.results.ownership import written_by_commbench


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


def beside(path: Path, suffix: str) -> Path:
    """A file (or folder) beside a results CSV: <stem><suffix>, the one rule every side file's name
    follows (.env.json, .raw.csv, .replay.csv, .verdict.json, .launch<k>.csv, .html, -charts, -model,
    -replay.png, -isolate.png)."""
    path = Path(path)
    return path.with_name(path.stem + suffix)


RAW, ENV = ".raw.csv", ".env.json"


def raw_path(path: Path) -> Path:
    """Where --raw's per-iteration samples live: <stem>.raw.csv."""
    return beside(path, RAW)


def env_path(path: Path) -> Path:
    """Where a run's host records live: <stem>.env.json beside its CSV."""
    return beside(path, ENV)


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


def target_kind(path: Path, flag: str, follow: bool = True) -> str | None:
    """What is at path: None (nothing), "file" (a regular file), "folder", "symbolic link" (where
    follow is False: a target), or what else it is (a device, a FIFO, a socket); a name the system
    refuses (too long) is one line. An input or a folder may be reached through a link (follow)."""
    try:
        mode = os.stat(path).st_mode if follow else os.lstat(path).st_mode
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
    if stat.S_ISLNK(mode):
        return "symbolic link"
    return "device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "FIFO" if stat.S_ISFIFO(mode) else "socket"


def check_target(path: Path, overwrite: bool, inputs: Iterable[Path] = (), flag: str = "--output") -> Path:
    """May a command write path? The module's rule, for one target (a run's targets together:
    commbench/results/outputs.py). A new file is created and removed to be sure it can be (/proc is
    writable for root, yet holds no new file; a name can be too long)."""
    path = Path(path)
    kind = target_kind(path, flag, follow=False)
    if kind == "folder":
        raise UserError(f"{flag} {path} is a folder; give a file name such as {path / 'run.csv'}")
    if kind == "symbolic link":
        raise UserError(
            f"{flag} {path} is a symbolic link: commbench writes through no link; give the path it points to, "
            "or another name"
        )
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
        if not written_by_commbench(path) and os.path.lexists(path):
            raise UserError(
                f"{path} was not written by commbench, and --overwrite replaces only commbench's own earlier "
                f"outputs; choose another {flag.split()[0]}, or move the file away yourself"
            )
        if os.access(path, os.W_OK) and os.access(Path(os.path.realpath(path)).parent, os.W_OK | os.X_OK):
            return path
        if os.path.lexists(path):
            raise UserError(f"cannot write {path}: permission denied; choose another {flag.split()[0]}")
        # Gone since it was seen: another process's probe of the same name (the ranks of one job check
        # the same targets at once); a new name after all.
    make_folder(path.parent)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666))
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
    interrupted write (Ctrl-C, a full disk) leaves the old file, never a cut one in its place. The
    rename replaces the name itself: a link put there since the target was checked is replaced,
    never written through. A full disk is said as such."""
    path = Path(path)
    real = path
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
