"""Reading a trace without holding it: its bytes opened only when it is a regular file, inflated as
they are read (gzip), held to the file's budget (limits.py), and the one big array of a JSON trace
("traceEvents", "nodes", "entries") yielded an element at a time, so a reader keeps only the events
it wants. Everything outside that array is parsed alike, and kept only where the reader asks.

The work is linear in the file's size whatever it holds: whitespace is skipped by a regex, a value
larger than the window is retried on a window twice as large (a long string costs about twice its
length, never a re-parse per chunk), a decode error that is not at the window's end is damage, said
at its byte offset, and no single C call runs over more than one event's bytes (Ctrl-C is honoured)."""

from __future__ import annotations

import codecs
import gzip
import hashlib
import json
import os
import re
import stat
import zlib
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

from commbench.errors import UserError
from commbench.replay.readers.limits import LIMITS, Limits

CHUNK = 1 << 20  # bytes inflated and decoded per read: the scanner's window is about this size
_WHITESPACE = " \t\n\r"
_SPACE = re.compile(r"[ \t\n\r]*")
_DELIMITER = re.compile(r"[ \t\n\r]*([,:\]}])[ \t\n\r]*")
# A value that ends, or a decode error that lies, this close to the window's end may be cut by it (a
# number, a literal, a \uXXXX\uXXXX escape): it is retried on a larger window, and so is a string
# left unterminated. Any other decode error is damage.
_MARGIN = 16
# Characters of elements decoded in one call, at most: enough to spread a call's cost over many
# tiny elements (1,000 of "0,"), few enough that the objects alive at once stay few (the cyclic
# GC's passes over them grow with them: 64K of deeply nested lists read 4 times slower than 2K)
_BATCH = 2 << 10
# A run of elements that are numbers, each with its comma: no reader reads them (an event is an
# object), so a run is found by one regex over a character class (no backtracking) and checked
# and counted by one C decode, never handed to Python one by one.
_NUMBERS = re.compile(r"[0-9eE.+\- \t\n\r,]*")
_Self = TypeVar("_Self", bound="_Closing")
_KINDS = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a folder",
}


def not_a_file(path: Path, mode: int) -> UserError | None:
    """The refusal of what is not a regular file (a FIFO, a device...), None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
    return UserError(f"{path}: {kind}, not a trace file; give the trace file itself (a regular file)")


def open_regular(path: Path) -> IO[bytes]:
    """The file opened for reading, refused unless it is a regular file. It is opened without
    blocking (a FIFO that slipped in would block an ordinary open) and checked on the open file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise UserError(f"{path}: cannot be read ({exc.strerror}); give a trace file you can read") from None
    if (refused := not_a_file(path, os.fstat(fd).st_mode)) is not None:
        os.close(fd)
        raise refused
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def cut_short(path: Path, exc: BaseException) -> UserError:
    return UserError(
        f"{path}: the file is cut short or damaged ({exc}); copy it again in full (a trace still being written is incomplete)"
    )


def damaged(path: Path, offset: int, what: str) -> UserError:
    return UserError(
        f"{path}: damaged at byte {offset:,} ({what}); copy the file again in full, or record the trace again"
    )


class _HashingReader:
    """The raw file, its bytes hashed as they are read (the trace's digest, in one pass)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw, self.sha = raw, hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.sha.update(data)
        return data

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self.raw.close()


class _Closing:
    """A context manager that closes itself on leaving: `with TraceBytes(path) as f:`."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class TraceBytes(_Closing):
    """A trace file's content as it is read: inflated when it is gzip, never past `budget` (a field
    of Limits) plus one byte, the raw file's bytes hashed."""

    def __init__(self, path: Path, limits: Limits = LIMITS, budget: str = "bytes") -> None:
        self.path, self.limits, self.budget = path, limits, budget
        self.inflated = 0  # bytes of content read so far
        raw = open_regular(path)
        gzipped = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        self._raw = _HashingReader(raw)
        self._file: Any = gzip.GzipFile(fileobj=self._raw, mode="rb") if gzipped else self._raw  # type: ignore[arg-type]

    def _room(self, n: int | None) -> int:
        room = getattr(self.limits, self.budget) - self.inflated + 1
        return room if n is None or n < 0 else min(n, room)

    def _counted(self, data: bytes) -> bytes:
        self.inflated += len(data)
        if self.inflated > getattr(self.limits, self.budget):
            raise self.limits.over(self.path, self.budget, "inflates to more than {}")
        return data

    def read(self, n: int | None = -1) -> bytes:
        try:
            return self._counted(self._file.read(self._room(n)))
        except (OSError, EOFError, zlib.error) as exc:
            raise cut_short(self.path, exc) from None

    def read_all(self) -> bytes:
        """The whole content, a chunk at a time: refused as soon as it passes the budget."""
        parts = []
        while part := self.read(CHUNK):
            parts.append(part)
        return b"".join(parts)

    def digest(self) -> str:
        """The sha256 of the file's bytes (those the reader did not need still count)."""
        while self._raw.read(CHUNK):
            pass
        return self._raw.sha.hexdigest()

    def close(self) -> None:
        self._raw.close()


def head(path: Path, size: int = 4096) -> bytes:
    """The first bytes of the file's content (inflated when it is gzip)."""
    with TraceBytes(path) as f:
        return f.read(size)


class JsonStream(_Closing):
    """One top-level JSON object read incrementally: `items(key)` yields the elements of the array
    under key one at a time; `meta` holds the other top-level values (those named in `keep`, every
    one when keep is None), complete once items() ends; `count` is how many elements it yielded,
    `found` whether the array was there.
    A context manager: the file is closed on leaving it."""

    def __init__(self, path: Path, limits: Limits = LIMITS, keep: Collection[str] | None = None) -> None:
        self.path, self.limits, self.keep = path, limits, keep
        self.meta: dict[str, Any] = {}
        self.count = 0
        self.found = False  # whether the array was met
        self._values = 0  # every value read at the top level or in the array: the events budget
        self._bytes = TraceBytes(path, limits)
        self._decoder = json.JSONDecoder()
        self._scan = self._decoder.scan_once  # the C scanner raw_decode wraps
        self._text = codecs.getincrementaldecoder("utf-8-sig")(errors="replace")  # a BOM is dropped
        self._buf = ""
        self._pos = 0
        self._dropped = 0  # characters of the content dropped from the window's start
        self._eof = False

    def digest(self) -> str:
        return self._bytes.digest()

    @property
    def inflated(self) -> int:
        """Bytes of the content read so far (inflated, where the file is gzip)."""
        return self._bytes.inflated

    def close(self) -> None:
        self._bytes.close()

    def _fill(self, at_least: int | None = None) -> bool:
        """At least `at_least` (a chunk) more bytes, or the rest of the file, onto the window, what was
        consumed dropped from it; False at the end of the file."""
        at_least = at_least or CHUNK
        parts, got = [], 0
        while got < at_least and not self._eof:
            data = self._bytes.read(min(CHUNK, at_least - got))
            got += len(data)
            self._eof = not data
            parts.append(self._text.decode(data, final=not data))
        self._dropped += self._pos
        held = self._buf[self._pos :] if self._pos else self._buf  # no copy of a window grown in place
        self._buf = ""
        self._buf = "".join([held, *parts])
        self._pos = 0
        return got > 0

    def _offset(self, pos: int) -> int:
        """The byte offset in the content of the window's character pos."""
        pending = len(self._text.getstate()[0])
        return self._bytes.inflated - pending - len(self._buf[pos:].encode("utf-8", "surrogatepass"))

    def _skip_ws(self) -> str:
        while True:
            self._pos = _SPACE.match(self._buf, self._pos).end()  # type: ignore[union-attr]
            if self._pos < len(self._buf):
                return self._buf[self._pos]
            if not self._fill():
                raise cut_short(self.path, EOFError("ends inside the JSON"))

    def _expect(self, chars: str) -> str:
        # the common case: the delimiter, and the whitespace around it, in one regex call
        m = _DELIMITER.match(self._buf, self._pos)
        if m is not None and m.end() < len(self._buf) and (char := m.group(1)) in chars:
            self._pos = m.end()
            return char
        char = self._skip_ws()
        if char not in chars:
            raise damaged(
                self.path, self._offset(self._pos), f"{' or '.join(map(repr, chars))} expected, {char!r} found"
            )
        self._pos += 1
        return char

    def _grow(self) -> None:
        """A window twice as large (at least a chunk more) for a value that did not fit, within the cap."""
        held = len(self._buf) - self._pos
        if held > self.limits.event_bytes:
            raise self.limits.over(
                self.path, "event_bytes", f"an element at byte {self._offset(self._pos):,} is longer than {{}}"
            )
        self._fill(max(CHUNK, held))

    def _value(self) -> Any:
        # the common case: a value that starts here and ends well inside the window, decoded by the
        # C scanner alone; anything else (whitespace first, a value the window cuts, damage) is
        # decoded again by the careful path, which says what is wrong
        buf, pos = self._buf, self._pos
        if pos < len(buf) and buf[pos] not in _WHITESPACE:
            try:
                value, end = self._scan(buf, pos)
            except (StopIteration, ValueError, RecursionError):
                pass
            else:
                if end <= len(buf) - _MARGIN:
                    self._pos = end
                    return self._counted(value)
        del buf  # the careful path may grow the window: hold no copy of the old one
        return self._careful_value()

    def _counted(self, value: Any) -> Any:
        self._values += 1
        if self._values > self.limits.events:
            raise self.limits.over(self.path, "events", "holds more than {} events")
        return value

    def _careful_value(self) -> Any:
        self._skip_ws()
        while True:
            try:
                value, end = self._decoder.raw_decode(self._buf, self._pos)
            except json.JSONDecodeError as exc:
                if not (exc.msg.startswith("Unterminated string") or exc.pos >= len(self._buf) - _MARGIN):
                    raise damaged(self.path, self._offset(exc.pos), exc.msg) from None
                if self._eof:
                    raise cut_short(self.path, exc) from None
                self._grow()
                continue
            except RecursionError:
                raise damaged(self.path, self._offset(self._pos), "lists or objects nested too deep to read") from None
            except ValueError:  # an integer of more digits than Python converts (4300)
                raise damaged(self.path, self._offset(self._pos), "a number of more than 4300 digits") from None
            if end > len(self._buf) - _MARGIN and not self._eof:  # a number may go on past the window
                self._grow()
                continue
            self._pos = end
            return self._counted(value)

    def _batch(self) -> tuple[list[Any] | None, int]:
        """The elements from here to a cut well inside the window and at most _BATCH on (after the
        last "}," there, else the last ","), decoded by one C call, and the cut. None for the elements where that does not
        decode: the cut lies inside an element (a string's comma, a nested object's), or an element
        is damaged; the caller then goes one element at a time past the cut. A cut inside an element
        never decodes: the text up to it leaves a string or a list open."""
        buf, pos = self._buf, self._pos
        end = min(len(buf) - _MARGIN, pos + _BATCH)
        cut = buf.rfind("},", pos, end) + 1 or buf.rfind(",", pos, end)
        if cut <= pos:
            return None, cut
        text = "".join(("[", buf[pos:cut], "]"))
        try:
            values, stop = self._scan(text, 0)
        except (StopIteration, ValueError, RecursionError):
            return None, cut
        if stop != len(text):  # the array ends before the cut: its last elements go one at a time
            return None, cut
        self._pos = cut + 1
        self._values += len(values)
        if self._values > self.limits.events:
            raise self.limits.over(self.path, "events", "holds more than {} events")
        return values, cut

    def _numbers(self) -> int:
        """Pass over a run of numbers here (with their commas), counted: where it ends, or (negated)
        where the run that does not decode as numbers ends (it then goes the careful way, once)."""
        buf, pos = self._buf, self._pos
        end = _NUMBERS.match(buf, pos).end()  # type: ignore[union-attr]
        end = buf.rfind(",", pos, min(end, len(buf) - _MARGIN)) + 1  # the window may cut the last
        if end <= pos + 1:
            return 0
        try:
            values, stop = self._scan("".join(("[", buf[pos : end - 1], "]")), 0)
        except (StopIteration, ValueError, RecursionError):
            return -end
        if stop != end - pos + 1:
            return -end
        self._pos, self.count, self._values = end, self.count + len(values), self._values + len(values)
        if self._values > self.limits.events:
            raise self.limits.over(self.path, "events", "holds more than {} events")
        return end

    def _elements(self) -> Iterator[dict[str, Any]]:
        """The array's elements that are objects, up to its "]", which it consumes (the others are
        counted, never yielded: no reader reads them): most of them a window's worth at a time
        (_batch), runs of numbers by one regex and one decode (_numbers), the others one by one, inline
        in the common case (the C scanner, then one regex for the comma and the whitespace), by the
        careful path otherwise."""
        scan, delimiter, budget = self._scan, _DELIMITER.match, self.limits.events
        alone_to = -1  # elements go one at a time until this offset in the content (characters)
        while True:
            if self._dropped + self._pos > alone_to:
                if (skipped := self._numbers()) > 0:
                    continue
                if skipped < 0:  # not numbers after all: one at a time past that run
                    alone_to = self._dropped - skipped
                    continue
                values, cut = self._batch()
                if values is not None:
                    self.count += len(values)
                    yield from (v for v in values if type(v) is dict)
                    continue
                alone_to = self._dropped + max(cut, self._pos)
            buf, pos = self._buf, self._pos
            try:
                value, end = scan(buf, pos)
            except (StopIteration, ValueError, RecursionError):
                end = len(buf)
            m = delimiter(buf, end) if end <= len(buf) - _MARGIN else None
            if m is not None and m.end() < len(buf) and (close := m.group(1)) in ",]":
                self._pos = m.end()
                self._values += 1
                if self._values > budget:
                    raise self.limits.over(self.path, "events", "holds more than {} events")
            else:
                buf = ""  # the careful path may grow the window: hold no copy of the old one
                value = self._careful_value()
                close = self._expect(",]")
            self.count += 1
            if type(value) is dict:
                yield value
            if close == "]":
                return

    def items(self, key: str) -> Iterator[dict[str, Any]]:
        """The objects of the top-level array `key`, in file order (its other elements counted in
        `count`, never yielded); other keys go to meta."""
        if (first := self._skip_ws()) != "{":
            raise UserError(f"{self.path}: not a trace (a JSON trace starts with '{{', this one with {first!r})")
        self._pos += 1
        if self._skip_ws() == "}":
            return
        while True:
            name = self._value()
            if not isinstance(name, str):
                raise damaged(self.path, self._offset(self._pos), f"an object key that is a {type(name).__name__}")
            self._expect(":")
            if name == key and self._skip_ws() == "[":
                self.found = True
                self._pos += 1
                if self._skip_ws() == "]":
                    self._pos += 1
                else:
                    yield from self._elements()
            else:
                value = self._value()
                if self.keep is None or name in self.keep:
                    self.meta[name] = value
            if self._expect(",}") == "}":
                return
