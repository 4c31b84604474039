"""The checks a case makes on what its commands left: files unchanged, nothing written beside them,
no secret anywhere, a history that still opens and holds only possible rows. Each returns what it
found wrong, or None."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

from tests.support.hostile_inputs.case import Check, Outcome

HISTORY = "results/history.sqlite"  # every case's history (run.py makes results/ and points COMMBENCH_HISTORY here)
_HASHED = 64 << 20  # larger files are told apart by size and mtime (the bombs: never written to)
_SCANNED = 256 << 20  # larger files are not searched for a secret (none of the secret cases has one)


def entries(folder: Path) -> Iterator[Path]:
    """Every path under folder, links and FIFOs included, never followed."""
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            yield Path(root) / name


def digest(path: Path) -> str:
    """What a path is: a link's target, a regular file's bytes (or size and mtime when large)."""
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        return f"link -> {os.readlink(path)}"
    if not stat.S_ISREG(info.st_mode):
        return f"special {stat.S_IFMT(info.st_mode):o}"
    if info.st_size > _HASHED:
        return f"large {info.st_size} {info.st_mtime_ns}"
    return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): digest(p) for p in entries(folder)}


def unchanged(*names: str) -> Check:
    """These files (relative to the folder) hold what they held before the run."""

    def check(o: Outcome) -> str | None:
        changed = [n for n in names if not os.path.lexists(o.folder / n) or digest(o.folder / n) != o.before[n]]
        return f"changed: {', '.join(changed)}" if changed else None

    check.__name__ = f"unchanged {', '.join(names)}"
    return check


def nothing_new(folder: str = ".") -> Check:
    """No file appeared directly in this folder (relative to the case's)."""

    def check(o: Outcome) -> str | None:
        where = o.folder / folder
        now = {str((where / n).relative_to(o.folder)) for n in os.listdir(where)} if where.is_dir() else set()
        new = sorted(now - o.before.keys())
        return f"written: {', '.join(new)}" if new else None

    check.__name__ = f"nothing new in {folder}/"
    return check


def not_the_json(name: str) -> Check:
    """The file, where there is one, is not the replay's --json document (which names its trace digest)."""

    def check(o: Outcome) -> str | None:
        path = o.folder / name
        start = path.read_bytes()[:4096] if path.is_file() else b""
        return f"{name} holds the --json document" if start.startswith(b"{") and b'"trace_digest"' in start else None

    check.__name__ = f"{name} not the JSON"
    return check


def no_secret(secret: str) -> Check:
    """The secret is in no output line, no file's name and no file's bytes under the folder."""

    def check(o: Outcome) -> str | None:
        found = ["the output"] if secret in o.output else []
        for path in entries(o.folder):
            if secret in path.name:
                found.append(f"the name {path.name}")
            elif _scanned(path) and secret.encode() in path.read_bytes():
                found.append(str(path.relative_to(o.folder)))
        return f"{secret!r} in {', '.join(found)}" if found else None

    check.__name__ = f"{secret!r} nowhere"
    return check


def _scanned(path: Path) -> bool:
    return path.is_file() and not path.is_symlink() and path.stat().st_size <= _SCANNED


def says(pattern: str) -> Check:
    """The output matches pattern (a regular expression)."""

    def check(o: Outcome) -> str | None:
        return None if re.search(pattern, o.output) else f"no {pattern!r} in the output"

    check.__name__ = f"says {pattern!r}"
    return check


def never_says(pattern: str, name: str | None = None) -> Check:
    """No line of the output matches pattern (a regular expression; name: what the table calls the check)."""

    def check(o: Outcome) -> str | None:
        for line in o.output.splitlines():
            if found := re.search(pattern, line):
                return f"said {found.group(0)!r} in ...{line[max(0, found.start() - 50) : found.end() + 10]!r}"
        return None

    check.__name__ = name or f"never says {pattern!r}"
    return check


def noted_when_run(word: str) -> Check:
    """When the replay ran (exit 0), one of its '#' lines (not the table) names word: it was told."""

    def check(o: Outcome) -> str | None:
        if o.exits != [0]:
            return None
        told = any(line.startswith("#") and word in line for line in o.output.splitlines())
        return None if told else f"replayed {word} without a word about it"

    check.__name__ = f"{word} noted when replayed"
    return check


def history_opens(location: str = HISTORY) -> Check:
    """The history, where there is one, still opens: `history list` on it exits 0."""

    def check(o: Outcome) -> str | None:
        if not (o.folder / location).exists():
            return None
        code, output = o.commbench("history", "list", "--history", location)
        return None if code == 0 else f"`history list` then: exit {code}, {output.strip()[-160:]!r}"

    check.__name__ = "history opens"
    return check


def listed_without(forged: str) -> Check:
    """`history list` shows no line that starts with forged (a line a host name made up)."""

    def check(o: Outcome) -> str | None:
        _, output = o.commbench("history", "list")
        hit = any(line.startswith(forged) for line in output.splitlines())
        return f"`history list` shows a line starting {forged!r}" if hit else None

    check.__name__ = "no forged line"
    return check


def possible_rows() -> Check:
    """Every row the history holds has a whole positive size and positive finite times."""

    def check(o: Outcome) -> str | None:
        if not (o.folder / HISTORY).exists():
            return None
        with sqlite3.connect(o.folder / HISTORY) as db:
            rows = db.execute("SELECT size_bytes, data FROM history_rows").fetchall()
        bad = [why for size, data in rows if (why := _impossible(size, json.loads(data)))]
        return None if not bad else f"{len(bad)} impossible row(s) filed: {bad[0]}"

    check.__name__ = "only possible rows filed"
    return check


def _impossible(size: object, cells: dict[str, object]) -> str | None:
    """What makes a filed row impossible (its size column, its cells), or None."""
    if not isinstance(size, int) or size <= 0 or str(cells.get("size_bytes")) != str(size):
        return f"size_bytes {size!r} (the file's {cells.get('size_bytes')!r})"
    times = {k: v for k, v in cells.items() if k.startswith("time_us") and v not in ("", None)}
    return next((f"{k} {v!r}" for k, v in times.items() if not _positive(v)), None)


def _positive(value: object) -> bool:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return True  # a list of per-round values and the like: not a time of its own
    return math.isfinite(number) and number > 0


def one_json_winner(json_name: str, outputs: tuple[str, ...]) -> Check:
    """Of two runs with one --json, the JSON left names the results of the one that exited 0."""

    def check(o: Outcome) -> str | None:
        winners = [out for out, code in zip(outputs, o.exits, strict=True) if code == 0]
        try:
            named = Path(json.loads((o.folder / json_name).read_text())["results"]).name
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return None if not winners else f"{json_name}: {exc}"
        return None if [Path(w).name for w in winners] == [named] else f"{json_name} names {named}, runs {o.exits}"

    check.__name__ = "one writer of the JSON"
    return check
