"""grouped_all_gather on real Gloo groups: every variant correct, S as documented, corruption caught."""

from __future__ import annotations

import pytest
import torch

from commbench.backends import copies_of
from commbench.ops.args import CollArgs, complete
from commbench.ops.grouped_all_gather import MAX_CHANNELS, GroupedAllGather, channels_for
from commbench.ops.memory import MemoryCase
from commbench.ops.spec import Point
from tests.support.distributed import run_ranks
from tests.support.fakes import FakeBackend
from tests.support.op_cases import every_variant, run_cases

# Depends on torch's API: CI runs it again on the oldest torch it tests (.ci/run, -m torch_api).
pytestmark = pytest.mark.torch_api


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 3])
def test_every_variant_is_correct(world):
    cases = every_variant(GroupedAllGather, {}, ("float32", "bfloat16", "int32"), (8, 1000, 16384)) + every_variant(
        GroupedAllGather, {"tensors": "1,7,2x5"}, ("float16",), (1,)
    )
    results = run_ranks(run_cases, world, cases)[0]
    measured = [r for r in results if "unavailable" not in r]
    assert {r["variant"] for r in measured} == {"separate", "concat", "coalesced"}
    assert all(r["wrong"] == 0 for r in measured), measured
    for r in measured:  # separate: one call per tensor (3 SyncBN shapes, or the 4 of --tensors, run in float16)
        assert r["calls"] == (1 if r["variant"] != "separate" else 4 if r["dtype"] == "float16" else 3)
    (grouped,) = {r["unavailable"] for r in results if "unavailable" in r}
    assert "Horovod" in grouped and "gloo" in grouped


@pytest.mark.slow
def test_separate_issues_one_all_gather_per_tensor():
    results = run_ranks(run_cases, 2, every_variant(GroupedAllGather, {"tensors": "1,7,2x5"}, ("float32",), (1,)))[0]
    separate = next(r for r in results if r["variant"] == "separate")
    assert separate["calls"] == 4 and separate["wrong"] == 0
    # S = gathered bytes of the 4 tensors: (1 + 7 + 5 + 5) elements x 4 bytes x 2 ranks
    assert all(r["s_bytes"] == 18 * 4 * 2 for r in results if "unavailable" not in r)


@pytest.mark.parametrize(
    "size, n, channels",
    [(1024, 2, 64), (4096, 2, 256), (16384, 2, 1024), (8, 2, 1), (1 << 30, 2, MAX_CHANNELS), (1024, 3, 42)],
)
def test_channels_follow_the_requested_size(size, n, channels):
    assert channels_for(size, 4, n) == channels


def test_the_default_workload_is_the_syncbn_shapes():
    """count, mean and invstd: tensors of 1, C and C elements, C = S / (2 x element size x n)."""
    op = GroupedAllGather()
    args = CollArgs(backend=FakeBackend(rank=0, world_size=4), dtype=torch.float32, variant="separate")
    op.setup(args, Point.of_size(4096))
    c = 4096 // (2 * 4 * 4)
    assert [t.numel() for t in args.input] == [1, c, c]


def test_unavailable_variants_say_why():
    class Grouping:
        name = "horovod"
        grouping = "grouped"

        def group_unavailable(self):
            return None

    op = GroupedAllGather()
    assert op.unavailable("grouped", Grouping()) is None
    assert "coalescing manager" in op.unavailable("coalesced", Grouping())
    assert op.unavailable("separate", Grouping()) is None


class CorruptedGroupedAllGather(GroupedAllGather):
    """Gathers correctly, then bumps rank 0's copy of the last tensor's last element."""

    def issue(self, args, phase):
        super().issue(args, phase)
        complete(args)
        args.output[-1][0, -1] += 1


@pytest.mark.slow
def test_a_corrupted_result_is_caught_in_every_variant():
    results = run_ranks(run_cases, 2, every_variant(CorruptedGroupedAllGather, {}, ("float32",), (1024,)))[0]
    assert [r["wrong"] for r in results if "unavailable" not in r] == [2, 2, 2]  # one element per rank


def test_memory_estimate_follows_the_clamped_channels_not_the_requested_size():
    case = MemoryCase(world_size=2, variant="separate", element_size=4, copies=copies_of("gloo"))
    op = GroupedAllGather()
    assert op.memory_bytes(case, Point.of_size(1 << 40)) == op.memory_bytes(case, Point.of_size(1 << 30))
    small, large = (GroupedAllGather({"tensors": t}) for t in ("2x1K", "2x1M"))
    assert small.memory_bytes(case, Point.of_size(8)) == small.memory_bytes(case, Point.of_size(1 << 30))
    assert (
        large.memory_bytes(case, Point.of_size(8)) - small.memory_bytes(case, Point.of_size(8)) >= 2 * 2 * (1 << 20) * 4
    )
