"""The op registry: an op is one module, found by scanning commbench/ops/; its spec is the only
place its facts live; options it declares reach the command line by themselves."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from commbench.cli import main
from commbench.ops import build_ops, load_op, op_options, registry, spec_of
from commbench.ops.base import Op
from commbench.ops.options import OpOption, Tensors
from commbench.ops.spec import OpSpec
from tests.support.distributed import REPO
from tests.support.package_copy import copy_package


def test_every_op_module_is_registered_under_its_spec_name():
    assert set(registry()) >= {"all_gather", "reduce_scatter_base", "all_reduce", "sync_bn"}
    for name, cls in registry().items():
        assert cls.spec.name == name == cls.name and cls.variants == cls.spec.variants
        assert cls.spec.baseline is None or cls.spec.baseline in cls.spec.variants
    assert spec_of("no_such_op") is None


def test_declared_options_become_flags_once_each():
    flags = [option.flag for option in op_options()]
    assert len(flags) == len(set(flags)) and {"--tensors", "--bucket-cap-mb", "--channels"} <= set(flags)
    help_text = CliRunner().invoke(main, ["sweep", "--help"]).output
    assert all(flag in help_text for flag in flags)


def test_two_different_declarations_of_one_flag_are_a_bug(monkeypatch):
    class Clash(Op):
        spec = OpSpec(
            "clash",
            "s",
            "S",
            registry()["all_gather"].spec.bus_factor,
            ("flat",),
            options=(OpOption("--tensors", "other meaning", Tensors()),),
        )

    monkeypatch.setitem(registry(), "clash", Clash)
    with pytest.raises(RuntimeError, match="--tensors"):
        op_options()


def test_plugins_load_by_module_and_class_and_bad_ones_are_one_line():
    assert load_op("tests.support.broken_ops:CorruptAllGather").name == "corrupt_all_gather"
    for bad, fragment in (
        ("nope", "unknown op 'nope'"),
        ("tests.support.broken_ops:Nope", "cannot load op"),
        ("os:path", "not a commbench"),
    ):
        with pytest.raises(Exception, match=fragment):
            load_op(bad)
    with pytest.raises(Exception, match="unknown variant 'x'"):
        build_ops(["all_gather"], {}, ["x"])


@pytest.mark.slow
def test_a_new_op_is_one_module_and_no_other_edit(tmp_path: Path):
    """Copy the package, drop in a copy of all_reduce under a new name: list and sweep pick it up."""
    run = copy_package(tmp_path)
    source = (REPO / "commbench" / "ops" / "all_reduce.py").read_text()
    renamed = source.replace('name="all_reduce"', 'name="all_reduce_copy"').replace(
        "class AllReduce(", "class AllReduceCopy("
    )
    assert renamed != source
    (tmp_path / "commbench" / "ops" / "all_reduce_copy.py").write_text(renamed)
    listed = run("list")
    assert listed.returncode == 0 and "  all_reduce_copy " in listed.stdout, listed.stdout + listed.stderr
    out = tmp_path / "run.csv"
    swept = run(
        "sweep", "--op", "all_reduce_copy", "--sizes", "8,4K", "-n", "2", "-w", "1", "--no-plot", "-o", str(out)
    )
    assert swept.returncode == 0, swept.stdout + swept.stderr
    rows = pd.read_csv(out)
    assert set(rows.op) == {"all_reduce_copy"} and len(rows) == 2 and (rows.wrong == 0).all()
    assert (rows.busbw_gbps / rows.algbw_gbps).round(6).eq(1.0).all()  # the bus factor came along: 2(n-1)/n at n=2
