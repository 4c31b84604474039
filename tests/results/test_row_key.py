"""The row key is defined once (commbench/results/schema.py): every key that restates part of it
(compare's match and series keys, the model's fit key, the speedup join, the SyncBN table's runs,
the raw samples' columns, the readers' required columns, the ETA's prior) is derived from it, so a column added to
the key reaches all of them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from commbench.results import schema

ROOT = Path(__file__).resolve().parents[2]

# Loads the schema from its source with one column added to the named key, before anything imports
# it, then prints every derived key (the report's fit table shows the model's FIT_KEY).
PROBE = """
import importlib.util, json, sys
name, key, column = "commbench.results.schema", sys.argv[1], sys.argv[2]
spec = importlib.util.find_spec(name)
text = open(spec.origin, encoding="utf-8").read()
marker = key + " = ("
assert text.count(marker) == 1, marker
text = text.replace(marker, marker + repr(column) + ", ")
module = importlib.util.module_from_spec(spec)
sys.modules[name] = module
exec(compile(text, spec.origin, "exec"), module.__dict__)
from commbench.analysis import compare, model, speedup, syncbn_table, trend, verdict
from commbench.results import reader
from commbench.results import row_outputs
from commbench.run import plan
keys = {
    "row": module.ROW_KEY,
    "raw samples": module.RAW_COLUMNS,
    "required": reader.REQUIRED_COLUMNS,
    "compare match": compare.ROW_KEY,
    "compare series": verdict.SERIES_KEY,  # the pairwise test's and the history gate's (verdict.series_key)
    "trend series": trend.SERIES_KEY,
    "model fit": model.FIT_KEY,
    "speedup join": speedup.SAME_RUN,
    "syncbn runs": syncbn_table.GROUP_COLUMNS,
    "raw samples key": row_outputs.RAW_KEY,
    "eta prior": plan.PRIOR_KEY,
}
print(json.dumps({k: list(v) for k, v in keys.items()}))
"""


def _derived_keys(key: str, column: str) -> dict[str, list[str]]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, key, column], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


@pytest.mark.slow  # a subprocess per key part
@pytest.mark.parametrize(
    "key, within_a_run",
    [("CASE_KEY", True), ("LAYOUT_KEY", False)],
    ids=["a case column", "a layout column"],
)
def test_a_column_added_to_the_key_reaches_every_derived_key(key: str, within_a_run: bool) -> None:
    keys = _derived_keys(key, "extra")
    # Rows of one run differ only in the case key: the raw samples, the readers' required columns,
    # the sink's raw-sample key and the ETA's prior (one fingerprint) name it; the layout (world
    # size, group) is the same on every row.
    per_run = {"raw samples", "required", "raw samples key", "eta prior"}
    expected = {name for name in keys if within_a_run or name not in per_run}
    assert {name for name, columns in keys.items() if "extra" in columns} == expected


def test_the_derived_keys_are_the_row_key_less_what_they_pair_over() -> None:
    from commbench.analysis import model, speedup, syncbn_table, verdict

    assert schema.ROW_KEY == ("op", "variant", "phase", "dtype", "mode", "size_bytes", "world_size", "group")
    assert verdict.SERIES_KEY == ("op", "variant", "phase", "dtype", "mode", "world_size", "group")
    assert model.FIT_KEY == ("run", "op", "variant", "phase", "dtype", "mode", "backend", "world_size", "group")
    assert speedup.SAME_RUN == ("backend", "run", "op", "phase", "dtype", "mode", "world_size", "group")
    assert syncbn_table.GROUP_COLUMNS == ["run", "backend", "dtype", "mode", "world_size", "group"]
    with pytest.raises(ValueError, match="not row-key columns: size"):
        schema.key_without("size")


def test_compare_states_the_key_it_matches_on() -> None:
    from commbench.cli.compare import compare

    stated = "(" + ", ".join(schema.ROW_KEY) + ")"
    page = re.sub(r"\s+", " ", (ROOT / "docs" / "compare.md").read_text(encoding="utf-8"))
    assert stated in page
    assert stated in re.sub(r"\s+", " ", compare.help or "")
    assert schema.key_words(schema.ROW_KEY) == "(op, variant, phase, dtype, mode, size, world size, group)"
