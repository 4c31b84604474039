"""The traces a user gives `commbench replay`, read: files and folders, `.json`, `.json.gz`, `.pkl`
(or a Flight Recorder dump's bare name), the format told from the content, never from the name.
Everything that makes a set of traces unusable is one UserError line saying what to give instead."""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Sequence
from pathlib import Path

from commbench.errors import UserError
from commbench.replay.readers import execution_trace, flight_recorder, kineto
from commbench.replay.readers.fields import Damaged
from commbench.replay.readers.format import Reader
from commbench.replay.readers.limits import LIMITS, Limits
from commbench.replay.readers.stream import head, not_a_file
from commbench.replay.record import Trace

WHAT_TO_GIVE = "give a torch.profiler trace (.json/.json.gz), an Execution Trace or a Flight Recorder dump"
_RANK_IN_NAME = re.compile(r"rank[_\-.]?(\d+)|(\d+)(?=(\.[a-z]+)*$)", re.IGNORECASE)


# Every trace format, in the order its first bytes are tried: a new format is its module and a line here.
READERS: tuple[Reader, ...] = (kineto.READER, execution_trace.READER, flight_recorder.READER)


def detect(path: Path) -> Reader | None:
    """The reader of the file's trace format, told from its content, or None."""
    start = head(path)
    text = start if start[:1] == b"\x80" else start.removeprefix(b"\xef\xbb\xbf").lstrip()  # a BOM, as editors write
    return next((r for r in READERS if r.recognises(text)), None)


def rank_in_name(path: Path) -> int | None:
    """The rank a file's name gives (rank0.json, trace_rank_3.json.gz, et_1.json), or None."""
    match = _RANK_IN_NAME.search(path.name)
    return int(match.group(1) or match.group(2)) if match else None


def _given(given: str) -> tuple[Path, bool]:
    """A path given on the command line, and whether it is a folder: refused in one line when it is
    neither a regular file nor a folder (a FIFO, a device, a symbolic link loop...) or is empty."""
    if not str(given).strip():
        raise UserError(f"an empty path given as a trace; {WHAT_TO_GIVE}")
    path = Path(given)
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UserError(f"{path}: a symbolic link loop, not a trace; {WHAT_TO_GIVE}") from None
        if exc.errno == errno.ENOENT and path.is_symlink():
            raise UserError(
                f"{path}: a symbolic link to {os.readlink(path)}, which does not exist; {WHAT_TO_GIVE}"
            ) from None
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise UserError(f"{path}: no such file or folder; {WHAT_TO_GIVE}") from None
        raise UserError(f"{path}: cannot be read ({exc.strerror}); {WHAT_TO_GIVE}") from None
    if path.is_dir():
        return path, True
    if (refused := not_a_file(path, mode)) is not None:
        raise refused
    return path, False


def _files(paths: Sequence[str]) -> list[tuple[Path, bool]]:
    """Each file to read, and whether it came from a folder (a folder's files that are no trace are
    skipped, and so is what in it is no regular file)."""
    out: list[tuple[Path, bool]] = []
    for given in paths:
        path, folder = _given(given)
        if folder:
            inside = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
            found = [p for p in inside if p.stat().st_size and detect(p)]
            if not found:
                raise UserError(f"{path}: the folder holds no trace; {WHAT_TO_GIVE}")
            out += [(p, True) for p in found]
        else:
            out.append((path, False))
    if not out:
        raise UserError(f"no trace given; {WHAT_TO_GIVE}")
    return out


def read(path: Path, limits: Limits = LIMITS) -> Trace:
    """One file, whatever its format. What no PyTorch trace holds (a count that is text, a group
    listing a rank twice, nesting past any parser) is one line naming the file."""
    try:
        trace = _read(path, limits)
    except Damaged as exc:
        raise UserError(f"{path}: {exc}; the trace is damaged or no trace PyTorch wrote: record it again") from None
    except RecursionError:
        raise UserError(f"{path}: nested too deep to read; the trace is damaged or no trace PyTorch wrote") from None
    except MemoryError:
        raise UserError(
            f"{path}: reading it asks for more memory than this machine has; the trace is damaged or no trace PyTorch wrote"
        ) from None
    if not trace.collectives:
        raise UserError(
            f"{path}: the trace holds no collectives (nothing to replay); profile the steps where the job "
            "communicates, with torch.distributed initialised"
        )
    return trace


def _read(path: Path, limits: Limits) -> Trace:
    if not path.stat().st_size:
        raise UserError(f"{path}: an empty file, not a trace; {WHAT_TO_GIVE}")
    reader = detect(path)
    if reader is None:
        raise UserError(f"{path}: not a trace; {WHAT_TO_GIVE}")
    return reader.read(path, rank_in_name(path), limits)


def _same_job(traces: list[Trace]) -> None:
    formats = sorted({t.format for t in traces})
    if len(formats) > 1:
        raise UserError(
            f"traces of two formats given together ({', '.join(formats)}); give one rank's traces of one format per rank"
        )
    worlds = {t.world_size for t in traces if t.world_size}
    if len(worlds) > 1:
        sizes = ", ".join(f"{t.path}: {t.world_size}" for t in traces if t.world_size)
        raise UserError(
            f"traces of two different jobs given together (world sizes {sizes}); give the traces of one job"
        )
    backends = {t.backend for t in traces if t.backend}
    if len(backends) > 1:
        raise UserError(
            f"traces of two different jobs given together (backends {', '.join(sorted(backends))}); give the traces of one job"
        )
    seen: dict[int, str] = {}
    for t in traces:
        if t.rank in seen:
            raise UserError(
                f"{seen[t.rank]} and {t.path} are both rank {t.rank}: two different jobs (or one trace twice); give one trace per rank of one job"
            )
        seen[t.rank] = t.path


def _all_ranks(traces: list[Trace], from_folder: bool) -> None:
    """Several ranks' traces must be all of them: the alignment compares every rank's sequence."""
    world = next((t.world_size for t in traces if t.world_size), None)
    if len(traces) < 2 or not world:
        return
    if (beyond := next((t for t in traces if t.rank >= world), None)) is not None:
        raise UserError(
            f"{beyond.path} is rank {beyond.rank}, outside its job's world of {world} ranks; give the traces of one job"
        )
    missing = sorted(set(range(world)) - {t.rank for t in traces})
    if missing:
        where = f"the folder {Path(traces[0].path).parent}" if from_folder else "the traces given"
        names = ", ".join(map(str, missing[:8])) + (" ..." if len(missing) > 8 else "")
        raise UserError(
            f"{where} lacks the trace of rank {names} of {world}; give every rank's trace, or one rank's trace alone (it then stands for all)"
        )


def load(paths: Sequence[str], limits: Limits = LIMITS) -> list[Trace]:
    """Every trace the paths name, by rank; refused in one line where they cannot be replayed."""
    files = _files(paths)
    traces = sorted((read(p, limits) for p, _ in files), key=lambda t: t.rank)
    _same_job(traces)
    for reader in (r for r in READERS if r.name == traces[0].format):  # what its files tell only together
        traces = reader.together(traces)
    _all_ranks(traces, any(from_folder for _, from_folder in files))
    if len(traces) == 1 and not traces[0].world_size and not any(c.group_ranks for c in traces[0].collectives):
        raise UserError(
            f"{traces[0].path}: the trace does not say how many ranks the job had (nor its groups' ranks); "
            "give every rank's trace together"
        )
    return traces
