"""The readers' fast paths give what the line-by-line reference gives: on a large generated file
(20,000 rows, a few of them cut or malformed), on random lines, and for the numbers and the
Welch test a comparison runs once per row. Durations belong to bench/readers_scale.py, not here."""

from __future__ import annotations

import random

import pandas as pd
import pytest
from scipy.stats import ttest_ind

from commbench.results import reader
from commbench.results.stats import rounds_p, welch_p
from tests.support.synth_results import Case, synth_run

ROWS = 4_000  # enough for the fast path to take whole blocks; the bench times 100,000


@pytest.fixture(scope="module")
def large_csv(tmp_path_factory):
    sizes = tuple(8 * (k + 1) for k in range(ROWS // 10))
    cases = [Case(op, variant, sizes=sizes) for op in ("all_gather", "all_reduce") for variant in "abcde"]
    return synth_run(tmp_path_factory.mktemp("scale") / "large.csv", cases, seed=7, iters=6, rounds=3, raw=False)


def _line_by_line(text: str) -> reader.Records:
    """split_records with its fast path turned off: the reference."""
    fast = reader._one_line_records
    reader._one_line_records = lambda *_: None
    try:
        return reader.split_records(text)
    finally:
        reader._one_line_records = fast


def test_a_large_file_with_bad_rows_splits_as_line_by_line(large_csv):
    lines = large_csv.read_text().splitlines(keepends=True)
    assert len(lines) == ROWS + 1
    lines[500] = lines[500][: len(lines[500]) // 2] + "\n"  # a row cut short in the middle
    lines[1800] = lines[1800].rstrip("\n") + ',"extra, cell"\n'  # one cell too many, quoted
    lines[3000] = "\n"  # a blank line
    text = "".join(lines)
    text = text + text.splitlines(keepends=True)[1][:40]  # a partial last row
    fast = reader.split_records(text)
    assert fast == _line_by_line(text)
    assert [line for line, _ in fast.malformed] == [501, 1801]
    assert fast.partial_line == ROWS + 2
    assert len(fast.rows) == ROWS - 3


def test_a_large_file_reads_whole_with_every_row_typed(large_csv):
    frame = reader.read_one(large_csv)
    assert len(frame) == ROWS and frame.attrs["skipped"] == 0
    assert frame["size_bytes"].dtype == "int64"
    assert frame[reader.ROUND_P50S].map(len).eq(3).all()
    assert (frame["command"] == "commbench sweep --seed 7").all()


def test_an_odd_quote_takes_the_line_by_line_path(large_csv):
    lines = large_csv.read_text().splitlines(keepends=True)[:200]
    lines[50] = lines[50].replace("all_gather", 'all"gather', 1)
    text = "".join(lines)
    assert reader._one_line_records(text.split("\n"), []) is None
    assert reader.split_records(text) == _line_by_line(text)


def test_plain_width_counts_cells_as_the_csv_module_does():
    rng = random.Random(1)
    answered = 0
    for _ in range(50_000):
        line = "".join(rng.choice('a,"\r x') for _ in range(rng.randint(1, 12))) + "\n"
        if line.count('"') % 2 or not line.strip():
            continue  # such lines never reach it
        width = reader._plain_width(line)
        if width is not None:
            answered += 1
            assert width == reader._width(line), repr(line)
    assert answered > 10_000


@pytest.mark.parametrize(
    "cells",
    [
        ["1", "2", "2", "2", "2"] * 3,
        ["1", "", "2", "2", "2", "2", "2", "2"],
        ["1.5", "x", "1", "1", "1", "1", "1", "1"],
        [""] * 9,
        ["1e400", "1", "1", "1", "1", "1", "1", "nan"],
        ["9999999999999999999"] * 8,
        [f"{i}.5" for i in range(20)],
    ],
)
def test_numbers_are_to_numeric(cells):
    column = pd.Series(cells, dtype=object).replace("", pd.NA)
    expected, got = pd.to_numeric(column, errors="coerce"), reader.numbers(column)
    assert got.dtype == expected.dtype
    pd.testing.assert_series_equal(got, expected)


def test_welch_is_scipys():
    rng = random.Random(3)
    for _ in range(500):
        a = [rng.gauss(0, 1) for _ in range(rng.randint(2, 6))]
        b = [rng.gauss(rng.choice([0, 0.5, 3]), rng.choice([0.001, 1, 5])) for _ in range(rng.randint(2, 6))]
        assert welch_p(a, b) == pytest.approx(float(ttest_ind(a, b, equal_var=False).pvalue), rel=1e-9, abs=1e-300)
    assert welch_p([1.0, 1.0, 1.0], [1.0, 2.0]) == pytest.approx(
        float(ttest_ind([1, 1, 1], [1, 2], equal_var=False).pvalue)
    )
    assert rounds_p([5.0, 5.0], [5.0, 5.0]) == 1.0 and rounds_p([5.0, 5.0], [6.0, 6.0]) == 0.0
