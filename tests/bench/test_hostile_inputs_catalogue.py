"""The hostile-input catalogue itself (tests/support/hostile_inputs) and bench/hostile_inputs.py's
table: every case makes its files without starting anything, the bombs are the valid documents
they claim to be at any size, and the before/after table puts both runs in one cell."""

from __future__ import annotations

import gzip
import json
import pickle
import sys

import pytest

from tests.support.distributed import REPO
from tests.support.hostile_inputs import CASES
from tests.support.hostile_inputs.case import GROUPS
from tests.support.hostile_inputs.fixtures import (
    BLOCK,
    damaged_trace,
    fr_json_bomb,
    fr_pickle_bomb,
    whitespace_trace,
    write_repeated,
)

sys.path.insert(0, str(REPO / "bench"))
from hostile_inputs import table


def test_every_group_of_the_issue_has_cases_and_ids_are_unique():
    assert {c.group for c in CASES} == set(GROUPS)
    assert len({c.id for c in CASES}) == len(CASES)
    assert all(c.exits and c.commands for c in CASES)
    assert {c.variant_of for c in CASES} - {""} <= {c.id for c in CASES}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_every_case_makes_its_files(case, tmp_path):
    case.make(tmp_path, 4096 if case.sizes else 0)
    assert any(tmp_path.iterdir()) or case.id == "device"


def test_a_repeated_gzip_is_the_bytes_it_says_across_blocks(tmp_path):
    count = BLOCK // 2 + 7  # units of 2 bytes: one whole block and a part of the next
    path = write_repeated(tmp_path / "r.gz", b"{head", b"ab", count, b"tail}")
    assert gzip.decompress(path.read_bytes()) == b"{head" + b"ab" * count + b"tail}"
    assert path.stat().st_size < 100_000


def test_the_bombs_are_valid_dumps_of_the_size_asked(tmp_path):
    dump = pickle.loads(gzip.decompress(fr_pickle_bomb(tmp_path / "b.pkl.gz", 5000).read_bytes()))
    assert dump["entries"][0]["frames"][0]["name"] == "a" * 5000
    dump = json.loads(gzip.decompress(fr_json_bomb(tmp_path / "b.json.gz", 5000).read_bytes()))
    assert dump["entries"][0]["frames"][0]["name"] == "a" * 5000
    text = gzip.decompress(whitespace_trace(tmp_path / "w.json.gz", 5000).read_bytes())
    assert " " * 5000 in text.decode() and len(json.loads(text)["traceEvents"]) == 3


def test_the_damaged_trace_is_damaged_at_its_second_event(tmp_path):
    text = damaged_trace(tmp_path / "d.json", 100_000).read_text()
    assert len(text) > 100_000
    with pytest.raises(json.JSONDecodeError) as error:
        json.loads(text)
    assert error.value.pos < 500


def _result(id: str, exits: list, right: bool, **checks: str | None) -> dict:
    return {
        "id": id,
        "group": "Tracebacks",
        "exits": exits,
        "error": "TypeError" if exits == [4] else None,
        "one_line": [exits == [2]],
        "traceback": exits == [4],
        "wall_s": 1.25,
        "peak_mb": 226.4,
        "checks": checks,
        "right": right,
    }


def test_the_table_shows_before_and_after_in_one_cell():
    before = {"a": _result("a", [4], False), "b": _result("b", [0], False, unchanged="changed: in.json")}
    after = [_result("a", [2], True), _result("b", [2], True, unchanged=None)]
    rows = table(after, before).splitlines()
    assert rows[0].startswith("| case | group | exit | one line?")
    assert "| 4 TypeError → 2 | no, traceback → yes |" in rows[2]
    assert "changed: in.json → pass" in rows[3] and rows[3].endswith("| no → yes |")
