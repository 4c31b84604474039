"""The rough edges a new user meets in the first hour: each mistake gets one line that says what to
do, the text names only ops that exist, and progress shows wherever a bar cannot."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import struct
import termios
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
from click.testing import CliRunner

from commbench.cli import main
from commbench.console.display import choose_mode
from commbench.ops import registry
from tests.support.distributed import REPO
from tests.support.errors import assert_one_line_error
from tests.support.synth_results import Case, synth_run

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _sweep(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, ["sweep", *args], env=env)


@pytest.mark.parametrize(
    "given, meant",
    [("all_gathr", "all_gather"), ("reduce_scatter", "reduce_scatter_base"), ("allreduce", "all_reduce")],
)
def test_an_unknown_op_gets_the_nearest_name(given: str, meant: str) -> None:
    assert_one_line_error(_sweep("--op", given), f"unknown op '{given}' (did you mean {meant}?); valid ops: all_gather")


def test_an_op_named_without_op_is_shown_the_option() -> None:
    assert_one_line_error(
        _sweep("all_gather"), "unexpected argument 'all_gather': ops are chosen with --op", "sweep --op all_gather`"
    )
    assert_one_line_error(_sweep("all_gathr"), "sweep --op all_gather`")
    assert_one_line_error(_sweep("--op", "barrier", "tomorrow"), "unexpected extra argument 'tomorrow'")


@pytest.mark.parametrize("sizes", ["8,,16", "8,16,", ",8"])
def test_an_empty_size_item_is_refused(sizes: str) -> None:
    assert_one_line_error(_sweep("--sizes", sizes), f"--sizes '{sizes}' has an empty item")


@pytest.mark.parametrize("precision", ["0%", "100%", "-1%"])
def test_precision_out_of_range_says_what_is_allowed(precision: str) -> None:
    assert_one_line_error(
        _sweep("--precision", precision), "--precision must be more than 0% and less than 100%, such as 2%"
    )


def test_master_addr_with_local_ranks_is_one_plain_sentence() -> None:
    assert_one_line_error(
        _sweep("--master-addr", "10.0.0.1"),
        "commbench: error: --master-addr applies under srun or mpirun only; the local ranks commbench starts "
        "always meet on 127.0.0.1, so leave it out",
    )


@pytest.mark.parametrize("host", ["a;b", "node@1", "rack/3"])
def test_a_host_name_holding_the_csvs_separators_is_refused(host: str) -> None:
    assert_one_line_error(_sweep("--op", "barrier", env={"COMMBENCH_HOST": host}), f"COMMBENCH_HOST='{host}' holds")


def test_no_output_folder_is_created_at_the_filesystem_root(tmp_path: Path) -> None:
    top = Path("/commbench-test-not-there")
    assert not top.exists()
    csv = synth_run(tmp_path / "a.csv", [Case("all_gather", "flat")], seed=1, raw=False)
    for args in (["report", str(csv), "-o", f"{top}/dir/r.html"], ["plot", str(csv), "-o", f"{top}/"]):
        result = CliRunner().invoke(main, args)
        created = top.exists()
        if created:
            shutil.rmtree(top)
        assert not created, f"{args[0]} created {top}"
        assert_one_line_error(result, f"commbench creates no folder at the filesystem root ({top}); create {top} first")


@contextlib.contextmanager
def _pty(columns: int) -> Iterator[IO[str]]:
    """A pseudo-terminal's writing end, columns wide (0: as mpirun hands its ranks)."""
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    try:
        with os.fdopen(follower, "w") as stream:
            yield stream
    finally:
        os.close(leader)


def test_progress_is_plain_on_mpiruns_zero_width_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """tqdm trims its bar to the terminal's width: on 0 columns it drew nothing under mpirun."""
    monkeypatch.delenv("CI", raising=False)
    with _pty(0) as mpirun_tty, _pty(80) as terminal:
        assert mpirun_tty.isatty() and choose_mode(mpirun_tty) == "plain"
        assert choose_mode(terminal) == "bar"


def test_the_text_names_only_ops_that_exist() -> None:
    """Every `--op` in README and docs/, and every op the top-level help names, is a registered op."""
    ops = set(registry())
    for page in DOCS:
        for names in re.findall(r"--op[ =]([\w,:.]+)", page.read_text()):
            unknown = [n for n in names.split(",") if n not in ops and ":" not in n and n not in ("NAME", "OP")]
            assert not unknown, f"{page.name}: --op {names}"
        assert not re.search(r"(?<![\w.-])reduce_scatter(?![\w])", page.read_text()), page.name
    help_text = CliRunner().invoke(main, ["--help"]).output
    assert not re.search(r"(?<![\w.-])reduce_scatter(?![\w])", help_text) and "reduce_scatter_base" in help_text


def test_the_readme_records_the_baseline_it_compares() -> None:
    """The compare example says how the baseline came to be: a sweep wrote it first."""
    readme = (REPO / "README.md").read_text()
    for block in re.findall(r"```bash\n(.*?)```", readme, re.S):
        for baseline in re.findall(r"commbench compare (\S+)", block):
            assert f"-o {baseline}" in block.split("commbench compare")[0], block
