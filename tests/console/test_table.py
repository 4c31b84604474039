"""The printed table: columns fit what an op prints, so no row shifts."""

from __future__ import annotations

from commbench.console.table import Table

ROW = {
    "op": "bucketed_reduce_scatter",
    "variant": "bucketed_100MB",
    "phase": "comm",
    "dtype": "float32",
    "size_bytes": 14 * 2**20 + 24,
    "count": 3670022,
    "time_us_mean": 251000.0,
    "time_us_mean_lo": 245000.0,
    "time_us_mean_hi": 257000.0,
    "time_us_p50": 243978.4,
    "time_us_p50_lo": 240000.0,
    "time_us_p50_hi": 250000.0,
    "time_us_p95": 378539.8,
    "algbw_gbps": 0.06,
    "busbw_gbps": 0.03,
    "wrong": 0,
    "iters": 10,
    "status": "ok",
    "note": "",
}


def _ends(line: str) -> list[int]:
    """Where each whitespace-separated field of a line ends."""
    ends, inside = [], False
    for i, char in enumerate(line + " "):
        if char != " " and not inside:
            inside = True
        elif char == " " and inside:
            inside = False
            ends.append(i)
    return ends


def test_columns_fit_the_longest_names_of_the_op():
    names = {
        "op": [ROW["op"]],
        "variant": ["per_tensor", "bucketed_100MB", "flat"],
        "phase": ["comm"],
        "dtype": ["float32"],
    }
    table = Table.fitted(names)
    titles = table.header("bucketed_reduce_scatter on 3 ranks").splitlines()[1]
    short = table.line({**ROW, "variant": "flat", "size_bytes": 8, "count": 2})
    long = table.line(ROW)
    # Text columns start where their titles do; numbers end where theirs do.
    assert long.index("bucketed_100MB") == short.index("flat") == titles.index("variant")
    numbers = slice(-9, None)  # size, count, p50, ±, p95, algbw, busbw, #wrong, iters: right-aligned
    assert _ends(long)[numbers] == _ends(short)[numbers] == _ends(titles)[numbers]
    assert " 14M " in long  # one size formatter: three significant digits, no offset


def test_an_unavailable_row_lines_up_with_the_op_and_variant():
    table = Table.fitted({"op": ["sync_bn"], "variant": ["native_horovod", "torch"]})
    row = {**ROW, "op": "sync_bn", "variant": "torch", "status": "unavailable", "note": "needs CUDA"}
    line = table.line(row)
    titles = table.header("x").splitlines()[1]
    assert line.index("unavailable: needs CUDA") == titles.index("phase")
