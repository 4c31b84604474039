"""The rest of the collective family (all_to_all, broadcast, reduce, gather, scatter, sendrecv,
barrier, and the in-place all_gather and reduce_scatter_base) on real Gloo groups of 2, 3 and 4
ranks: every variant checks out, a broken copy of each is caught, S and the bus factor follow
nccl-tests in a real sweep's CSV, the uneven splits are seeded, and bad options are one line."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch
from click.testing import CliRunner

from commbench.cli import main
from commbench.errors import UserError
from commbench.ops import registry
from commbench.ops.all_gather import AllGather
from commbench.ops.all_to_all import IMBALANCE, AllToAll, receive_imbalance, uneven_splits
from commbench.ops.args import CollArgs
from commbench.ops.barrier import Barrier
from commbench.ops.broadcast import Broadcast
from commbench.ops.gather import Gather
from commbench.ops.reduce import Reduce
from commbench.ops.reduce_scatter_base import ReduceScatterBase
from commbench.ops.rooted import ROOT
from commbench.ops.scatter import Scatter
from commbench.ops.sendrecv import SendRecv
from commbench.ops.spec import Point
from tests.support import broken_ops
from tests.support.distributed import commbench, run_ranks, torchrun
from tests.support.errors import assert_sweep_refuses
from tests.support.op_cases import every_variant, gloo_lacks, not_ok, run_cases
from tests.support.op_table import TABLE
from tests.support.sweeps import sweep_on_rank

# Depends on torch's API: CI runs it again on the oldest torch it tests (.ci/run, -m torch_api).
pytestmark = pytest.mark.torch_api

NEW_OPS = (AllToAll, Broadcast, Reduce, Gather, Scatter, SendRecv, Barrier)
ROOTED = (Broadcast, Reduce, Gather, Scatter)
SIZES = (8, 1000, 65536)
DTYPE_SIZES = ((("float32",), SIZES), (("bfloat16", "float16", "float64", "int32"), (1000,)))


def _in_place(op_cls, dtypes, sizes):
    return [c for c in every_variant(op_cls, {}, dtypes, sizes) if c[2] == "inplace"]


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 3, 4])
def test_every_op_and_variant_is_correct(world):
    # Every size in float32, every dtype at one size: the values are exact in all of them.
    cases = [c for op_cls in NEW_OPS for d, s in DTYPE_SIZES for c in every_variant(op_cls, {}, d, s)]
    cases += [c for op_cls in (AllGather, ReduceScatterBase) for d, s in DTYPE_SIZES for c in _in_place(op_cls, d, s)]
    # The last rank as the root: the root is an option, not a convention.
    cases += [c for op_cls in ROOTED for c in every_variant(op_cls, {"root": str(world - 1)}, ("float32",), SIZES)]
    results = run_ranks(run_cases, world, cases, timeout=300)[0]
    assert len(results) == len(cases)
    lacked = gloo_lacks()  # torch 2.11's Gloo has no list all_to_all: known before the call
    for case, result in zip(cases, results):
        if (case[0].name, case[2]) in lacked:
            assert result.get("unavailable") == lacked[(case[0].name, case[2])], (case, result)
            continue
        assert "unavailable" not in result, (case, result)
        assert result["wrong"] == 0, (case, result)
    # One API call per op: the uneven splits ride in all_to_all_single, both directions in one batch.
    apis = {(c[0].name, c[2]): r.get("apis") for c, r in zip(cases, results)}
    assert apis[("all_to_all", "uneven")] == "all_to_all_single"
    assert apis[("all_to_all", "list")] == (None if ("all_to_all", "list") in lacked else "all_to_all")
    assert apis[("sendrecv", "pair")] == "batch_isend_irecv" and apis[("barrier", "barrier")] == "barrier"


BROKEN = [
    broken_ops.CorruptAllToAll,
    broken_ops.CorruptBroadcast,
    broken_ops.CorruptReduce,
    broken_ops.CorruptGather,
    broken_ops.CorruptScatter,
    broken_ops.CorruptSendRecv,
    broken_ops.BrokenBarrier,
]


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 3])
def test_a_broken_copy_of_each_op_is_caught(world):
    cases = [c for op_cls in BROKEN for c in every_variant(op_cls, {}, ("float32",), (1024,))]
    results = run_ranks(run_cases, world, cases, timeout=300)[0]
    caught = {(case[0].name, case[2]): result.get("wrong") for case, result in zip(cases, results)}
    # One wrong element per checked rank: gloo's reduce checks only the root; pair on odd n leaves
    # one rank out; a barrier that does not wait lets every rank but the last leave early.
    lists = None if gloo_lacks() else world  # unavailable where this torch's Gloo has no list all_to_all
    expected = {("corrupt_all_to_all", "single"): world, ("corrupt_all_to_all", "list"): lists} | {
        ("corrupt_all_to_all", "uneven"): world,
        ("corrupt_broadcast", "flat"): world,
        ("corrupt_reduce", "flat"): 1,
        ("corrupt_gather", "flat"): world,
        ("corrupt_scatter", "flat"): world,
        ("corrupt_sendrecv", "pair"): world - world % 2,
        ("corrupt_sendrecv", "ring"): world,
        ("corrupt_sendrecv", "oneway"): world // 2,  # only the odd ranks receive
        ("broken_barrier", "barrier"): world - 1,
    }
    assert caught == expected


@pytest.mark.slow
def test_broken_in_place_variants_are_caught():
    cases = [
        (broken_ops.CorruptAllGather, {}, "inplace", "float32", 1024),
        (broken_ops.CorruptReduceScatter, {}, "inplace", "float32", 1024),
    ]
    assert [r["wrong"] for r in run_ranks(run_cases, 3, cases)[0]] == [3, 3]


def _splits_everywhere(backend, seeds):
    """This rank's draw of the splits for each seed, and the splits the op set up."""
    op = AllToAll({"imbalance": "0.8"})
    args = CollArgs(backend=backend, dtype=torch.float32, variant="uneven")
    op.setup(args, Point.of_size(40000))
    return [uneven_splits(backend.world_size, 10000, 0.8, seed) for seed in seeds], args.state.splits


@pytest.mark.slow
def test_uneven_splits_are_identical_on_every_rank_and_differ_across_seeds():
    results = run_ranks(_splits_everywhere, 3, (0, 1))
    assert all(r == results[0] for r in results)  # every rank drew the same matrices
    (seed0, seed1), used = results[0]
    assert seed0 != seed1
    assert used == uneven_splits(3, 9999, 0.8)  # 40000 bytes of float32 rounded to a multiple of 3 ranks
    for splits in (seed0, seed1):
        assert all(sum(row) == 10000 for row in splits)  # every rank sends exactly its count: S is realised


def test_splits_follow_the_imbalance():
    even = uneven_splits(4, 1000, 0.0)
    assert even == [[250] * 4] * 4 and receive_imbalance(even) == 1.0
    skews = [receive_imbalance(uneven_splits(8, 100_000, s)) for s in (0.25, 0.5, 1.0, 2.0)]
    assert skews == sorted(skews) and skews[0] > 1.0 and skews[-1] > 2.0
    assert uneven_splits(3, 2, 5.0)[0] in ([2, 0, 0], [0, 2, 0], [0, 0, 2])  # zero-sized chunks are allowed
    assert uneven_splits(4, 1000, 0.5, seed=7) == uneven_splits(4, 1000, 0.5, seed=7)


# The ops of a family sweep; their S and bus factor as nccl-tests defines them are TABLE's.
FAMILY = (
    "all_to_all",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
    "sendrecv",
    "barrier",
    "all_gather",
    "reduce_scatter_base",
)
FACTORS = {op: TABLE[op].factor for op in FAMILY}


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 3, 4])
def test_a_real_sweeps_csv_has_the_bus_factor_of_each_op(n, tmp_path):
    out = tmp_path / "family.csv"
    proc = commbench(
        "sweep",
        "--nproc",
        str(n),
        "--op",
        ",".join(FACTORS),
        *"--sizes 1K,64K -n 2 -w 1 --no-plot --imbalance 1 -o".split(),
        str(out),
        "--root",
        str(n - 1),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    df = pd.read_csv(out)
    assert set(df.op) == set(FACTORS) and not_ok(df).empty, not_ok(df)[["op", "variant", "status", "note"]]
    for op, factor in FACTORS.items():
        rows = df[(df.op == op) & (df.status == "ok")]  # not_ok: the rest are what this torch's Gloo lacks
        if factor is None:
            assert (rows.size_bytes == 0).all() and rows.algbw_gbps.isna().all() and rows.busbw_gbps.isna().all()
            assert len(rows) == 1  # one point, not one per size
            continue
        assert (rows.size_bytes == rows["count"] * 4).all()
        ratio = rows.busbw_gbps / rows.algbw_gbps  # each written to 6 significant digits
        assert ratio.sub(factor(n)).abs().lt(1e-4).all(), (op, list(ratio))
    pair = df[(df.op == "sendrecv") & (df.variant == "pair")]
    said = pair.note.fillna("").str.contains(f"rank {n - 1} has no partner")
    assert said.all() if n % 2 else not said.any()
    uneven = df[(df.op == "all_to_all") & (df.variant == "uneven")]
    assert uneven.note.str.contains("--imbalance 1: max received / mean").all()
    assert df[df.op == "broadcast"].note.str.contains(f"root {n - 1}").all()
    assert "   -        -" in proc.stdout  # the printed table leaves the barrier's bandwidth empty


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["--op", "broadcast", "--root", "2", "--nproc", "2"], ["--root 2 is not one of the 2 ranks", "0 to 1"]),
        (["--op", "gather,scatter", "--root", "7", "--nproc", "3"], ["--root 7", "0 to 2"]),
        (["--op", "reduce", "--root", "-1"], ["--root '-1' is not a rank"]),
        (["--op", "scatter", "--root", "first"], ["--root 'first' is not a rank"]),
        (["--op", "all_to_all", "--imbalance", "-0.5"], ["--imbalance '-0.5' must be a finite number >= 0"]),
        (["--op", "all_to_all", "--imbalance", "lots"], ["--imbalance 'lots' is not a number"]),
        (["--op", "all_to_all", "--imbalance", "nan"], ["must be a finite number"]),
        (["--op", "all_to_all", "--imbalance", "inf"], ["must be a finite number"]),
        (["--imbalance", "x"], ["'x' is not a number"]),  # every op: checked before spawning
    ],
)
def test_bad_root_and_imbalance_are_one_line_errors(args, fragments):
    assert_sweep_refuses(args, *fragments)


def test_options_parse():
    assert ROOT.value(None) == 0 and ROOT.value("3") == 3 and ROOT.value(3) == 3
    assert IMBALANCE.value(None) == 0.5 and IMBALANCE.value("0") == 0.0 and IMBALANCE.value("1.5") == 1.5
    for bad in ("-1", "x", "1.5"):
        with pytest.raises(UserError):
            ROOT.value(bad)
    assert Broadcast({"root": "3"}).world_error(4) is None and "--root 4" in Broadcast({"root": "4"}).world_error(4)


@pytest.mark.slow
def test_a_root_beyond_the_ranks_of_a_launcher_is_one_line(tmp_path):
    """Under torchrun the ranks find out themselves; rank 0 says it once."""
    proc = torchrun(2, "sweep", "--op", "reduce", "--root", "2", "--sizes", "8", "-o", str(tmp_path / "x.csv"))
    errors = [line for line in proc.stderr.splitlines() if line.startswith("commbench: error:")]
    assert len(errors) == 1 and "--root 2 is not one of the 2 ranks" in errors[0], proc.stderr[-3000:]
    assert not (tmp_path / "x.csv").exists()


def test_every_new_op_is_registered_with_its_variants():
    expected = {
        "all_to_all": ("single", "list", "uneven"),
        "broadcast": ("flat",),
        "reduce": ("flat",),
        "gather": ("flat",),
        "scatter": ("flat",),
        "sendrecv": ("pair", "ring", "oneway"),
        "barrier": ("barrier",),
    }
    for name, variants in expected.items():
        assert registry()[name].variants == variants
    assert "inplace" in registry()["all_gather"].variants and "inplace" in registry()["reduce_scatter_base"].variants


def test_list_shows_s_and_the_factor_of_every_new_op():
    out = CliRunner().invoke(main, ["list"]).output
    for name in ("all_to_all", "broadcast", "reduce", "gather", "scatter", "sendrecv", "barrier"):
        assert f"  {name} " in out
    assert "variants: single, list, uneven" in out and "variants: pair, ring" in out
    assert "uneven: the realised total of the rank's splits" in out and "log-normal" in out
    assert "S = 0; busbw factor none (latency only" in out
    assert "variants: flat, list, inplace" in out


def _family_in_groups(backend, folder: str, root: str) -> list[str]:
    """The runner's sweep of the family in intra and inter groups of four ranks as two hosts of two."""
    from commbench.run.agreement import PeerError
    from commbench.run.config import SweepConfig
    from tests.run.test_groups import _as_host_of_two

    _as_host_of_two(backend)
    outcomes = []
    for kind in ("intra", "inter"):
        path = str(Path(folder) / f"{kind}.csv")
        options = {"root": root, "imbalance": "1"}
        cfg = SweepConfig(
            backend="gloo", ops=FAMILY, sizes=(1024,), iters=2, warmup=1, group=kind, output=path, op_options=options
        )
        try:
            sweep_on_rank(backend, cfg, options)
            outcomes.append(path)
        except UserError as exc:
            outcomes.append(f"UserError: {exc.format_message()}")
        except PeerError:
            outcomes.append("PeerError")
    return outcomes


@pytest.mark.slow
def test_roots_and_peers_are_ranks_of_the_group(tmp_path):
    """In groups, --root 1 and the sendrecv peers are group ranks (rank 1 of {0, 2} is world rank 2)."""
    for kind, path in zip(("intra", "inter"), run_ranks(_family_in_groups, 4, str(tmp_path), "1")[0]):
        frame = pd.read_csv(path)
        assert set(frame.op) == set(FAMILY) and set(frame.group) == {kind} and set(frame.group_size) == {2}
        assert not_ok(frame).empty, not_ok(frame)[["op", "variant", "status", "note"]]


@pytest.mark.slow
def test_a_root_beyond_the_group_is_refused_by_rank_0_alone(tmp_path):
    results = run_ranks(_family_in_groups, 4, str(tmp_path), "2")
    message = "UserError: --root 2 is not one of the 2 ranks: give a rank from 0 to 1"
    assert results[0] == [
        f"{message} (under --group intra, ranks count within each group)",
        f"{message} (under --group inter, ranks count within each group)",
    ]
    assert all(r == ["PeerError", "PeerError"] for r in results[1:])
    assert not list(tmp_path.iterdir())  # nothing written
