"""The nccl-tests-like table rank 0 prints as the sweep goes."""

from __future__ import annotations

import sys
from typing import Any

from commbench.units import format_size

_HEADER = (
    f"# {'op':<20} {'variant':<16} {'phase':<16} {'dtype':<8} {'size':>7} {'count':>10} "
    f"{'p50(us)':>10} {'p95(us)':>10} {'algbw':>8} {'busbw':>8} {'#wrong':>6}"
)


def header(title: str) -> str:
    return f"# {title}\n{_HEADER}\n#{' ' * 88}{'(GB/s)':>8} {'(GB/s)':>8}"


def line(row: dict[str, Any]) -> str:
    if row["status"] == "unavailable":
        return f"  {row['op']:<20} {row['variant']:<16} unavailable: {row['note']}"
    wrong = "skip" if row["wrong"] < 0 else str(row["wrong"])
    return (
        f"  {row['op']:<20} {row['variant']:<16} {row['phase']:<16} {row['dtype']:<8} "
        f"{format_size(row['size_bytes']):>7} {row['count']:>10} {row['time_us_p50']:>10.1f} "
        f"{row['time_us_p95']:>10.1f} {_gbps(row['algbw_gbps'])} {_gbps(row['busbw_gbps'])} {wrong:>6}"
    )


def _gbps(value: float) -> str:
    """A bandwidth cell; '-' where the op has none (a barrier moves no bytes)."""
    return f"{value:>8.3f}" if value == value else f"{'-':>8}"


def progress(done: int, what: str) -> None:
    """A one-line progress indication on stderr, when someone is watching."""
    if sys.stderr.isatty():
        sys.stderr.write(f"\r\033[K[{done}] {what}")
        sys.stderr.flush()


def progress_done() -> None:
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()
