"""Where a sweep's printed lines and its progress go.

The process that owns the terminal draws: commbench's launcher when it spawned the ranks (rank 0's
stdout is a pipe to it), else rank 0 itself (under torchrun or horovodrun). A spawned rank 0 sends its
progress to the launcher as marked lines on stdout, which the launcher's relay turns back into
progress; every other line passes through unchanged.

How progress shows depends on where stdout goes:

- a terminal with a width: a tqdm bar below the scrolling table, with the cases done of the total, the ETA and the
  case being measured. tqdm because it is small, has no dependencies of its own, imports in tens of
  milliseconds, and its write() prints a line above a live bar without tearing it;
- anything else (a file, a pipe, mpirun's 0-column pseudo-terminal): a plain `# progress:` line every PLAIN_EVERY_S seconds;
- CI (the CI variable set, as CI services do): nothing beyond the table.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import IO, Any

PROGRESS_MARK = "\x1ecommbench-progress "
PLAIN_EVERY_S = 10.0


@dataclass(frozen=True)
class Status:
    """Where a sweep stands: cases finished of the total, the share of the work done, the ETA and
    the case being measured now."""

    done: int
    total: int
    fraction: float
    eta_s: float | None
    label: str

    def text(self) -> str:
        eta = "ETA --:--" if self.eta_s is None else f"ETA {_clock(self.eta_s)}"
        return f"{self.done}/{self.total} cases, {eta}, {self.label}"

    def to_line(self) -> str:
        return PROGRESS_MARK + json.dumps(asdict(self))

    @classmethod
    def from_line(cls, line: str) -> Status:
        return cls(**json.loads(line[len(PROGRESS_MARK) :]))


def _clock(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def choose_mode(stream: IO[str], relay: bool = False) -> str:
    """relay (a spawned rank 0: its launcher draws), quiet (CI), bar (a terminal) or plain."""
    if relay:
        return "relay"
    if under_ci():
        return "quiet"
    return "bar" if _has_width(stream) else "plain"


def _has_width(stream: IO[str]) -> bool:
    """A terminal a bar can be drawn on. mpirun gives its ranks a pseudo-terminal 0 columns wide
    (Open MPI forwards it to wherever mpirun's own output goes): tqdm trims its bar to that width
    and draws nothing, so such a stream gets plain progress lines."""
    try:
        return stream.isatty() and os.get_terminal_size(stream.fileno()).columns > 0
    except (OSError, ValueError, AttributeError):  # no file descriptor (a test's StringIO), or closed
        return False


class Display:
    """Prints lines and shows progress as the mode says; safe to close twice."""

    def __init__(self, mode: str | None = None, stream: IO[str] | None = None, err: IO[str] | None = None) -> None:
        self.stream = stream or sys.stdout
        self.err = err or sys.stderr
        self.mode = mode or choose_mode(self.stream)
        self._bar: Any = None
        self._last_plain = time.monotonic()
        self._told_closed = False

    def write(self, text: str, err: bool = False) -> None:
        """One line (a trailing newline is added when missing), printed above the bar if there is one."""
        text = text if text.endswith("\n") else text + "\n"
        out = self.err if err else self.stream
        try:
            if self._bar is not None:
                from tqdm import tqdm

                tqdm.write(text, file=out, end="")
            else:
                out.write(text)
            out.flush()
        except BrokenPipeError:
            self._closed(out)

    def _closed(self, out: IO[str]) -> None:
        """The reader of a stream went away (`commbench sweep | head -1`): the printing ends, the run
        does not. Its file descriptor is pointed at /dev/null, so every later line (the launcher's
        relay of its ranks' rows, the closing lines) goes nowhere instead of failing; the rows go on
        into the CSV, and one line on stderr says so."""
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, out.fileno())
            os.close(devnull)
        if out is not self.err and not self._told_closed:
            self._told_closed = True
            with contextlib.suppress(OSError, ValueError):
                self.err.write("commbench: note: stdout was closed; the run goes on, every row into its CSV\n")
                self.err.flush()

    def status(self, status: Status) -> None:
        if self.mode == "relay":
            self.write(status.to_line())
        elif self.mode == "bar":
            self._draw(status)
        elif self.mode == "plain" and time.monotonic() - self._last_plain >= PLAIN_EVERY_S:
            self._last_plain = time.monotonic()
            self.write(f"# progress: {status.text()}")

    def _draw(self, status: Status) -> None:
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(
                total=1000, file=self.stream, bar_format="{percentage:3.0f}%|{bar:24}| {desc}", leave=False
            )
        self._bar.n = min(1000, round(status.fraction * 1000))
        self._bar.set_description_str(status.text(), refresh=False)
        self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
