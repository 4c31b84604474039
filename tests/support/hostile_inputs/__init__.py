"""Every case of issue 44, as data: the files each is made of (generated, bombs of any size), the
commbench commands run on them, and what is right once the issue is fixed. The tests run each at CI
size (tests/test_hostile_inputs.py); bench/hostile_inputs.py runs them at the issue's sizes, before
and after. One module per group of the issue; case.py says what a case is, checks.py what a check
is, run.py how a case runs (in a fresh folder, under memory and time limits)."""

from __future__ import annotations

from tests.support.hostile_inputs import files, importer, memory, secrets, silent, tracebacks
from tests.support.hostile_inputs.case import GROUPS, Case

CASES: list[Case] = sorted(
    [*files.CASES, *memory.CASES, *tracebacks.CASES, *importer.CASES, *silent.CASES, *secrets.CASES],
    key=lambda c: GROUPS.index(c.group),
)
BY_ID = {c.id: c for c in CASES}
assert len(BY_ID) == len(CASES), "two cases share an id"
