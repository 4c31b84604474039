"""--group world|intra|inter: which ranks each group holds, and rows measured in the groups.

Four ranks on this machine count as two hosts of two through COMMBENCH_HOST, the host name
a rank reports in its node information (the agreement gathers it, and the groups are formed from
it). Two hosts in network namespaces, with a real link between them, are in test_two_hosts.py.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from commbench.errors import UserError
from commbench.results.reader import read_one
from commbench.run.config import SweepConfig
from commbench.run.groups import rank_groups, refusal
from tests.support.distributed import commbench, run_ranks
from tests.support.sweeps import sweep_on_rank
from tests.support.synth_results import Case, synth_run

LAYOUTS = [
    ("world", ["a", "a", "b", "b"], [[0, 1, 2, 3]]),
    ("intra", ["a", "a", "b", "b"], [[0, 1], [2, 3]]),
    ("inter", ["a", "a", "b", "b"], [[0, 2], [1, 3]]),
    # Ranks dealt round-robin over hosts (mpirun --map-by node): a host's ranks in rank order.
    ("intra", ["a", "b", "a", "b"], [[0, 2], [1, 3]]),
    ("inter", ["a", "b", "a", "b"], [[0, 1], [2, 3]]),
    ("intra", ["b", "b", "a", "a", "c", "c"], [[0, 1], [2, 3], [4, 5]]),
    ("inter", ["b", "b", "a", "a", "c", "c"], [[0, 2, 4], [1, 3, 5]]),
    ("intra", ["a", "b"], [[0], [1]]),
    ("inter", ["a", "a"], [[0], [1]]),
]


@pytest.mark.parametrize("kind, hosts, groups", LAYOUTS)
def test_layout(kind, hosts, groups):
    assert rank_groups(kind, hosts) == groups
    assert refusal(kind, hosts) is None
    # Every rank is in exactly one group.
    assert sorted(r for g in groups for r in g) == list(range(len(hosts)))


def test_uneven_hosts_are_refused_for_intra_and_inter_only():
    hosts = ["a", "a", "a", "b"]
    for kind in ("intra", "inter"):
        assert refusal(kind, hosts) == (
            f"--group {kind} needs the same number of ranks on every host, but the ranks per host are a: 3, b: 1; "
            "start as many ranks on each host, or use --group world"
        )
    assert refusal("world", hosts) is None


def test_a_group_kind_that_does_not_exist_is_refused_in_the_configuration():
    with pytest.raises(UserError, match="unknown group 'rack'; valid groups: world, intra, inter"):
        SweepConfig(backend="gloo", ops=("all_gather",), sizes=(8,), group="rack")
    assert (
        SweepConfig(backend="gloo", ops=("all_gather",), sizes=(8,)).option_digests()["group"]
        != (SweepConfig(backend="gloo", ops=("all_gather",), sizes=(8,), group="intra").option_digests()["group"])
    )


# -- reading rows back ---------------------------------------------------------------------------------


def test_csvs_from_before_group_existed_read_as_world(tmp_path):
    path = synth_run(tmp_path / "old.csv", [Case("all_gather", "flat")], seed=1, raw=False, world_size=4)
    frame = pd.read_csv(path).drop(columns=["group", "group_size"])
    frame.to_csv(path, index=False)
    read = read_one(path)
    assert set(read.group) == {"world"} and set(read.group_size) == {4}


def test_compare_keeps_groups_apart(tmp_path):
    from click.testing import CliRunner

    from commbench.cli import main

    world = synth_run(tmp_path / "world.csv", [Case("all_gather", "flat")], seed=1, world_size=4)
    intra = synth_run(tmp_path / "intra.csv", [Case("all_gather", "flat")], seed=2, world_size=4, group="intra")
    result = CliRunner().invoke(main, ["compare", str(world), str(intra)])
    assert result.exit_code == 2 and "group world vs intra" in result.output, result.output
    same = CliRunner().invoke(main, ["compare", str(intra), str(intra)])
    assert same.exit_code == 0 and "n=4 --group intra" in same.output, same.output


# -- real process groups: four ranks as two hosts of two ------------------------------------------------


def _as_host_of_two(backend) -> None:
    backend.host = f"node{backend.rank // 2}"  # what COMMBENCH_HOST makes a launched rank report


def _members(backend) -> dict[str, object]:
    """For each kind, this rank's group as the view sees it, and the world ranks a real all_gather returns."""
    import torch

    from commbench.run.agreement import agree
    from commbench.run.groups import form_groups

    _as_host_of_two(backend)
    # Under --group intra every rank learns every host (under world, only rank 0 needs them).
    cfg = SweepConfig(backend="gloo", ops=("all_gather",), sizes=(8,), group="intra")
    facts = agree(backend, cfg, None)
    seen: dict[str, object] = {"hosts": facts.hosts, "node_ranks": facts.node_ranks}
    for kind in ("world", "intra", "inter"):  # every rank forms every kind, in one order
        view = form_groups(backend, kind, facts.rank_hosts).backend
        out = torch.zeros(view.world_size, dtype=torch.int64)
        view.all_gather_flat(out, torch.tensor([backend.rank])).wait()
        seen[kind] = (view.rank, view.world_size, out.tolist())
    seen["issued"] = backend.issued  # the views' calls count on the world backend
    return seen


@pytest.mark.slow
def test_groups_on_four_ranks_as_two_hosts_hold_the_right_ranks():
    results = run_ranks(_members, 4)
    assert {r["hosts"] for r in results} == {"node0;node1"}
    # torchrun-style ranks carry no node number here: hosts are numbered in rank order.
    assert {r["node_ranks"] for r in results} == {"0-1@node0/0;2-3@node1/1"}
    assert [r["world"] for r in results] == [(r, 4, [0, 1, 2, 3]) for r in range(4)]
    assert [r["intra"] for r in results] == [(0, 2, [0, 1]), (1, 2, [0, 1]), (0, 2, [2, 3]), (1, 2, [2, 3])]
    assert [r["inter"] for r in results] == [(0, 2, [0, 2]), (0, 2, [1, 3]), (1, 2, [0, 2]), (1, 2, [1, 3])]
    assert {r["issued"] for r in results} == {3}


def _sweep_in_groups(backend, folder: str) -> list[str]:
    """The runner's sweep (agreement, groups, measurement, rows) on this rank, once per kind."""
    _as_host_of_two(backend)
    paths = []
    for kind in ("intra", "inter"):
        path = str(Path(folder) / f"{kind}.csv")
        ops, sizes = ("all_gather", "all_reduce"), (1024, 65536)
        cfg = SweepConfig(backend="gloo", ops=ops, sizes=sizes, iters=2, warmup=1, group=kind, output=path)
        sweep_on_rank(backend, cfg)
        paths.append(path)
    return paths


@pytest.mark.slow
def test_rows_measured_in_groups_carry_the_group_and_use_its_size(tmp_path):
    from commbench.ops import spec_of

    paths = run_ranks(_sweep_in_groups, 4, str(tmp_path))[0]
    for kind, path in zip(("intra", "inter"), paths):
        frame = pd.read_csv(path)
        assert (frame.status == "ok").all() and (frame.wrong == 0).all(), frame[["op", "variant", "status", "note"]]
        assert set(frame.group) == {kind} and set(frame.group_size) == {2} and set(frame.world_size) == {4}
        # S is the group's: an all_gather of 1K over 2 ranks gathers 2 x 128 float32, over 4 it would be 4 x 64.
        assert set(frame.size_bytes) == {1024, 65536} and set(frame[frame.op == "all_gather"]["count"]) == {256, 16384}
        for op, rows in frame.groupby("op"):
            factor = spec_of(op).bus_factor(2)
            assert (rows.busbw_gbps.round(3) == (rows.algbw_gbps * factor).round(3)).all(), (op, factor)


@pytest.mark.slow
def test_groups_of_one_rank_are_unavailable_rows_saying_why(tmp_path):
    """On one host, every rank is its own inter group: no collective to run, and the rows say so."""
    out = tmp_path / "inter.csv"
    proc = commbench("sweep", "--op", "all_gather", "--sizes", "8", "--group", "inter", "--no-plot", "-o", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    frame = pd.read_csv(out)
    assert set(frame.status) == {"unavailable"} and set(frame.variant) == {"flat", "list", "inplace"}
    assert set(frame.group) == {"inter"} and set(frame.group_size) == {1}
    assert set(frame.note) == {
        "--group inter makes groups of one rank (every rank is on one host): nothing to exchange"
    }


def _agree_on_uneven_hosts(backend) -> str:
    from commbench.run.agreement import PeerError, agree

    backend.host = "node0" if backend.rank < 2 else "node1"
    try:
        agree(backend, SweepConfig(backend="gloo", ops=("all_gather",), sizes=(8,), group="intra"), None)
    except UserError as exc:
        return f"UserError: {exc.format_message()}"
    except PeerError:
        return "PeerError"
    return "agreed"


@pytest.mark.slow
def test_uneven_hosts_stop_every_rank_and_rank_0_says_why():
    results = run_ranks(_agree_on_uneven_hosts, 3)
    assert results[1:] == ["PeerError", "PeerError"]
    assert results[0].startswith("UserError: --group intra needs the same number of ranks on every host")
