"""The timed loop's bound calls change nothing a row or a diagnosis reports: `calls`, `api` and the
issued-call counter equal, for every registered op, variant and phase, blocking and non-blocking,
what recording every call as it is made gives (tests/support/call_counts.py); and a bound call issues the
transport's own function without recording."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch

from commbench.backends.base import Backend
from commbench.backends.torch_dist import FLAT_ALL_GATHER
from commbench.ops import registry
from commbench.ops.all_gather import AllGather
from commbench.ops.args import CollArgs
from commbench.ops.base import IssueOp
from commbench.ops.spec import Point
from tests.support.call_counts import differences
from tests.support.distributed import run_ranks


@pytest.mark.slow
def test_calls_api_and_issued_counter_are_unchanged_for_every_op_variant_and_phase() -> None:
    ranks = run_ranks(differences, 2, timeout=300)
    for found in ranks:
        assert found["differ"] == {}
    compared = ranks[0]["compared"]
    # Every registered op runs on Gloo CPU ranks (some variants do not: native SyncBN needs CUDA).
    assert {key.split("/")[0] for key in compared} == set(registry())
    calls, api, _ = compared["all_gather/flat/comm/window=3"]
    assert calls == 1.0 and api in FLAT_ALL_GATHER
    assert compared["grouped_all_gather/separate/comm/window=1"][0] == 5.0  # one per --tensors entry


class Counting(Backend):
    """A transport whose one collective counts how often its function ran."""

    name = "counting"
    binds = True

    def __init__(self) -> None:
        super().__init__()
        self.ran = 0

    def init(self, timeout_s: float, launch: Any) -> None: ...
    def close(self) -> None: ...
    def version(self) -> str:
        return "counting"

    def _gather(self, output: Any, input: Any) -> Any:
        self.ran += 1
        return Done()

    def all_gather_flat(self, output: Any, input: Any) -> Any:
        return self.bound_or_called("all_gather_flat", self._gather, output, input)

    all_gather_list = reduce_scatter_flat = reduce_scatter_list = all_reduce = all_gather_flat

    def barrier(self) -> None: ...
    def all_gather_object(self, obj: Any) -> list[Any]:
        return [obj]


class Done:
    def wait(self) -> None: ...


def test_a_bound_call_is_counted_once_when_bound_and_runs_without_recording() -> None:
    backend = Counting()
    op, args = AllGather(), CollArgs(backend=backend, dtype=torch.float32, variant="flat")
    op.setup(args, Point.of_size(8))
    with backend.binding() as binding:
        iteration = op.prepare(args, "comm")
    assert backend.ran == 0 and binding.calls == Counter({"all_gather_flat": 1})  # bound, not issued
    for _ in range(3):
        iteration()
    assert backend.ran == 3 and len(args.wait_objs) == 3
    assert backend.calls == Counter() and backend.issued == 0  # the bound call recorded nothing
    op.issue(args, "comm")  # the unbound path records as before
    assert backend.calls == Counter({"all_gather_flat": 1}) and backend.issued == 1
    with pytest.raises(RuntimeError, match="only valid inside"):
        backend.bind(backend.all_gather_flat, args.output, args.input)


def test_an_op_that_overrides_issue_is_timed_through_it_even_with_inherited_calls() -> None:
    class Louder(IssueOp, AllGather):
        said = 0

        def issue(self, args: CollArgs, phase: str) -> None:
            Louder.said += 1  # what the subclass adds is part of its iteration
            super().issue(args, phase)

    backend = Counting()
    op, args = Louder(), CollArgs(backend=backend, dtype=torch.float32, variant="flat")
    op.setup(args, Point.of_size(8))
    with backend.binding() as binding:
        iteration = op.prepare(args, "comm")
    iteration()
    assert Louder.said == 1 and backend.ran == 1
    assert binding.calls == Counter() and backend.calls == Counter({"all_gather_flat": 1})  # counted as made
