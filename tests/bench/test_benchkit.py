"""bench/ reaches commbench through commbench.benchkit: every name a script takes from it is listed
there, public, and found where the facade says it lives (lint-imports holds bench/ to the facade)."""

from __future__ import annotations

import ast

import pytest

from commbench import benchkit
from tests.support.distributed import REPO


def _taken() -> set[str]:
    names = set()
    for script in (REPO / "bench").glob("*.py"):
        for node in ast.walk(ast.parse(script.read_text(), str(script))):
            if isinstance(node, ast.ImportFrom) and node.module == "commbench.benchkit":
                names |= {alias.name for alias in node.names}
    return names


def test_every_name_a_bench_script_takes_is_listed_and_public() -> None:
    taken = _taken()
    assert taken and taken <= set(benchkit.__all__), sorted(taken - set(benchkit.__all__))
    assert not [name for name in benchkit.__all__ if name.startswith("_")]


def test_every_listed_name_is_found_and_an_unlisted_one_is_refused() -> None:
    for name in benchkit.__all__:
        assert getattr(benchkit, name) is not None, name
    with pytest.raises(AttributeError, match="add it to _OWNERS"):
        benchkit.TimedCaseTypo  # noqa: B018
