"""The nccl-tests-like table rank 0 prints as the sweep goes."""

from __future__ import annotations

from typing import Any

from commbench.units import format_size

_HEADER = (
    f"# {'op':<20} {'variant':<16} {'phase':<16} {'dtype':<8} {'size':>7} {'count':>10} "
    f"{'p50(us)':>10} {'±':>6} {'p95(us)':>10} {'algbw':>8} {'busbw':>8} {'#wrong':>6} {'iters':>6}"
)
_UNITS = (
    f"# {'':<20} {'':<16} {'':<16} {'':<8} {'':>7} {'':>10} {'':>10} {'(95%)':>6} {'':>10} {'(GB/s)':>8} {'(GB/s)':>8}"
)
NOISY_MARK = "noisy"


def header(title: str) -> str:
    return (
        f"# {title}\n{_HEADER}\n{_UNITS}\n"
        f"# ±: half-width of the p50's 95% interval; '{NOISY_MARK}': the interval is wide or the rounds disagree"
    )


def line(row: dict[str, Any]) -> str:
    if row["status"] == "unavailable":
        return f"  {row['op']:<20} {row['variant']:<16} unavailable: {row['note']}"
    wrong = "skip" if row["wrong"] < 0 else str(row["wrong"])
    p50 = row["time_us_p50"]
    half = (row["time_us_p50_hi"] - row["time_us_p50_lo"]) / 2 / p50 if p50 > 0 else float("inf")
    noisy = f"  {NOISY_MARK}" if NOISY_MARK in row["note"] else ""
    return (
        f"  {row['op']:<20} {row['variant']:<16} {row['phase']:<16} {row['dtype']:<8} "
        f"{format_size(row['size_bytes']):>7} {row['count']:>10} {p50:>10.1f} {half:>6.1%} "
        f"{row['time_us_p95']:>10.1f} {row['algbw_gbps']:>8.3f} {row['busbw_gbps']:>8.3f} {wrong:>6} "
        f"{row['iters']:>6}{noisy}"
    )
