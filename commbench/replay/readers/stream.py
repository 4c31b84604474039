"""Reading a trace without holding it: its bytes opened as they are (gzip streamed), and the one big
array of a JSON trace ("traceEvents", "nodes") yielded an element at a time, so a reader keeps only
the events it wants. Everything outside that array (a few KB of metadata) is kept whole."""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from commbench.errors import UserError

CHUNK = 1 << 20  # characters decoded per read: the scanner's buffer stays about this size
_WHITESPACE = " \t\n\r"


class HashingReader:
    """A binary file whose bytes are hashed as they are read (the trace's digest, in one pass)."""

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


def is_gzip(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(2) == b"\x1f\x8b"


def opened(path: Path) -> IO[bytes]:
    """The file's content, decompressed as it is read when it is gzip."""
    return gzip.open(path, "rb") if is_gzip(path) else path.open("rb")


def head(path: Path, size: int = 4096) -> bytes:
    """The first bytes of the file's content (decompressed when it is gzip)."""
    try:
        with opened(path) as f:
            return f.read(size)
    except (OSError, EOFError, zlib.error) as exc:
        raise UserError(f"{path}: cannot be read ({exc}); give a trace file as PyTorch wrote it") from None


def cut_short(path: Path, exc: BaseException) -> UserError:
    return UserError(
        f"{path}: the file is cut short or damaged ({exc}); copy it again in full (a trace still being written is incomplete)"
    )


class JsonStream:
    """One top-level JSON object read incrementally: `items(key)` yields the elements of the array
    under key one at a time; `meta` holds every other top-level value, complete once items() ends;
    `count` is how many elements it yielded. A context manager: the file is closed on leaving it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.meta: dict[str, Any] = {}
        self.count = 0
        self._raw = HashingReader(path.open("rb"))
        binary: IO[bytes] = gzip.GzipFile(fileobj=self._raw, mode="rb") if is_gzip(path) else self._raw  # type: ignore[arg-type]
        self._file = binary
        self._decoder = json.JSONDecoder()
        self._incremental = __import__("codecs").getincrementaldecoder("utf-8")(errors="replace")
        self._buf = ""
        self._pos = 0
        self._eof = False

    def digest(self) -> str:
        while self._raw.read(CHUNK):  # the bytes the parse did not need still count in the digest
            pass
        return self._raw.sha.hexdigest()

    def close(self) -> None:
        self._raw.close()

    def __enter__(self) -> JsonStream:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _fill(self) -> bool:
        try:
            data = self._file.read(CHUNK)
        except (OSError, EOFError, zlib.error) as exc:
            raise cut_short(self.path, exc) from None
        text = self._incremental.decode(data, final=not data)
        self._buf = self._buf[self._pos :] + text
        self._pos = 0
        if not data:
            self._eof = True
        return bool(data)

    def _skip_ws(self) -> str:
        while True:
            while self._pos < len(self._buf) and self._buf[self._pos] in _WHITESPACE:
                self._pos += 1
            if self._pos < len(self._buf):
                return self._buf[self._pos]
            if not self._fill():
                raise cut_short(self.path, EOFError("ends inside the JSON"))

    def _expect(self, chars: str) -> str:
        char = self._skip_ws()
        if char not in chars:
            raise UserError(
                f"{self.path}: not a trace (JSON expected {chars!r} at character {self._pos}, found {char!r})"
            )
        self._pos += 1
        return char

    def _value(self) -> Any:
        self._skip_ws()
        while True:
            try:
                value, end = self._decoder.raw_decode(self._buf, self._pos)
            except json.JSONDecodeError as exc:
                # a value cut by the chunk's end: read more and try again; at the end of the file it is damage
                if self._eof:
                    raise cut_short(self.path, exc) from None
                self._fill()
                continue
            if end == len(self._buf) and not self._eof:  # a number may go on in the next chunk
                self._fill()
                continue
            self._pos = end
            return value

    def items(self, key: str) -> Iterator[Any]:
        """The elements of the top-level array `key`, in file order; other keys go to meta."""
        self._expect("{")
        if self._skip_ws() == "}":
            return
        while True:
            name = self._value()
            self._expect(":")
            if name == key and self._skip_ws() == "[":
                self._pos += 1
                if self._skip_ws() == "]":
                    self._pos += 1
                else:
                    while True:
                        value = self._value()
                        self.count += 1
                        yield value
                        if self._expect(",]") == "]":
                            break
            else:
                self.meta[str(name)] = self._value()
            if self._expect(",}") == "}":
                return
