"""Pages whose tables are generated from the specs hold what the generator prints today."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from commbench.cli import main

REPO = Path(__file__).resolve().parents[2]
BEGIN = "<!-- generated: `commbench list --format markdown` from the op specs; edit the specs, then regenerate -->\n"
END = "<!-- end of generated table -->\n"


def test_the_op_table_of_docs_ops_md_is_the_generated_one():
    page = (REPO / "docs" / "ops.md").read_text()
    assert page.count(BEGIN) == 1 and page.count(END) == 1
    committed = page[page.index(BEGIN) + len(BEGIN) : page.index(END)]
    result = CliRunner().invoke(main, ["list", "--format", "markdown"])
    assert result.exit_code == 0, result.output
    assert committed == result.output, (
        "docs/ops.md's op table is stale: replace it with `commbench list --format markdown`"
    )
    for name in ("all_gather", "sync_bn", "bucketed_all_reduce"):  # every op has a row
        assert f"| `{name}` |" in committed
