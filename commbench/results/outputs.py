"""A command's outputs, planned together before anything runs: the one writing rule, enforced here.

Every file a command writes goes into one OutputPlan first: the results CSV and the files beside it
(paths.beside), a --json document, a chart, a report. Each target passes paths.check_target (no
folder, device or link; an existing file only under --overwrite and only commbench's own), and the
plan adds what one target cannot see alone: no two outputs at one path (`-o a.csv --json a.csv`),
none that is one of the command's inputs (a trace, a --model CSV, whatever it reads), and never the
results history. A run's plan is made by the process that starts the ranks (or rank 0 under a
launcher), before any rank starts, so a refusal costs nothing and leaves nothing behind.

The files this process writes itself once the run ends (--json, a replay's chart) are claimed when
planned: created empty (or, under --overwrite, opened) and locked, so a second run naming the same
file is refused while this one runs, as the results CSV's writer refuses a second writer. A claim
that is never written is removed when the plan is released; one a killed run left behind is an
empty file, which --overwrite may replace.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from commbench.errors import UserError
from commbench.results.paths import (
    ENV,
    RAW,
    beside,
    busy_message,
    check_target,
    output_path,
    refuse_busy,
    target_kind,
    write_atomically,
)


def identity(path: Path) -> str:
    """What makes two names one file: the real folder and the name (a target is never a link)."""
    path = Path(path)
    return os.path.join(os.path.realpath(path.parent), path.name)


@dataclass
class OutputPlan:
    """Every file one command will write, checked together; `claim` the ones this process writes."""

    overwrite: bool
    inputs: tuple[Path, ...] = ()
    history: Path | None = None  # a SQLite history (never an output of a command that files a run)
    targets: dict[str, str] = field(default_factory=dict)  # identity -> what goes there ("--json x.json")
    _claims: dict[str, tuple[int, bool]] = field(default_factory=dict)  # identity -> (fd, created here)

    def add(self, path: Path | str, flag: str = "--output", what: str | None = None) -> Path:
        """Plan one target: the module's rule, then this plan's (duplicates, inputs, the history).
        what: how the target is named in a refusal, where that is not `flag path`."""
        path = Path(path)
        key = identity(path)
        if key in self.targets:
            raise UserError(
                f"{flag} {path} is also where {self.targets[key]} goes: one run writes each file once; "
                "give another name"
            )
        for given in self.inputs:
            if identity(given) == key or _same_file(path, given):
                raise UserError(f"{flag} {path} is one of this command's inputs ({given}); give another file name")
        if self.history is not None and (identity(self.history) == key or _same_file(path, self.history)):
            raise UserError(f"{flag} {path} is the results history; give another file name")
        check_target(path, self.overwrite, self.inputs, flag)
        refuse_busy(path)  # a file another run is writing now is refused before any rank starts
        self.targets[key] = what or f"{flag} {path}"
        return path

    def add_folder(self, folder: Path | str, what: str) -> Path:
        """Plan a folder of outputs (a run's charts): a folder or a new name, never a link or a file;
        each file written into it passes the rule when it is written (charts/render.py)."""
        folder = Path(folder)
        kind = target_kind(folder, what, follow=False)
        if kind not in (None, "folder"):
            raise UserError(f"{what} {folder} is a {kind}; move it away or give another --output")
        self.targets.setdefault(identity(folder), what)
        return folder

    def claim(self, path: Path) -> Path:
        """Hold a planned target for this process until it writes it: a second run is refused."""
        path = Path(path)
        key = identity(path)
        flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        created = not os.path.lexists(path)
        try:
            fd = os.open(path, flags | (os.O_CREAT | os.O_EXCL if created else 0), 0o666)
        except FileExistsError:
            raise UserError(f"{path} already exists; choose another name or pass --overwrite") from None
        except OSError as exc:
            raise UserError(f"cannot write {path}: {exc.strerror}; choose another name") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UserError(busy_message(path)) from None
        self._claims[key] = (fd, created)
        return path

    def write(self, path: Path, data: bytes | str) -> Path:
        """Write a claimed (or planned) target whole (paths.write_atomically); the claim is kept."""
        written = write_atomically(path, data)
        fd, _ = self._claims.get(identity(path), (None, False))
        if fd is not None:
            self._claims[identity(path)] = (fd, False)  # written: no longer this plan's to remove
        return written

    def release(self) -> None:
        """End the claims; a claim created here and never written is removed (it was empty)."""
        for key, (fd, created) in list(self._claims.items()):
            with contextlib.suppress(OSError):
                if created and os.fstat(fd).st_size == 0 and _still(key, fd):
                    os.unlink(key)
            os.close(fd)
        self._claims.clear()

    @contextlib.contextmanager
    def held(self) -> Iterator[OutputPlan]:
        """The plan, released however the block ends."""
        try:
            yield self
        finally:
            self.release()

    @contextlib.contextmanager
    def released_on_error(self) -> Iterator[OutputPlan]:
        """The plan, released if the block fails (a refusal, Ctrl-C): no claim left behind."""
        try:
            yield self
        except BaseException:
            self.release()
            raise


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _still(key: str, fd: int) -> bool:
    """Whether the name still holds the file fd has open (not replaced since by a rename)."""
    try:
        here, held = os.lstat(key), os.fstat(fd)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (held.st_dev, held.st_ino)


@dataclass(frozen=True)
class RunOutputs:
    """What a measuring run writes and reads, as its configuration says: the CSV as the user named
    it (None: the default name), the side files rank 0 writes beside it (paths.beside's suffixes), the
    files the command writes itself once the run ends ((path, flag): --json), the run's inputs, and
    the SQLite history it files itself in (None: none, or a database URL)."""

    requested: str | None
    overwrite: bool
    raw: bool = False
    side_files: tuple[str, ...] = ()
    extra: tuple[tuple[str, str], ...] = ()
    inputs: tuple[str, ...] = ()
    history: str | None = None

    def plan(self, default: Callable[[Path | None], Path]) -> tuple[Path, OutputPlan]:
        """The CSV (the user's --output; a folder gets default(folder) inside it; none, default(None))
        and the plan holding it and every file beside it, checked, and the extra files claimed."""
        plan = OutputPlan(
            self.overwrite,
            tuple(Path(p) for p in self.inputs),
            Path(self.history) if self.history else None,
        )
        path = plan.add(output_path(self.requested, default), what="the results CSV")
        for suffix in (ENV, *([RAW] if self.raw else []), *self.side_files):
            name = beside(path, suffix.rstrip("/"))
            if suffix.endswith("/"):
                plan.add_folder(name, f"the run's {suffix} folder beside its CSV,")
            else:
                plan.add(name, what=f"the run's {suffix} file beside its CSV")
        with plan.released_on_error():
            for target, flag in self.extra:
                plan.claim(plan.add(target, flag))
        return path, plan
