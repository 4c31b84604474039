"""S (the bytes one iteration moves) and the bus factor of every registered op, as nccl-tests defines
them, from one table: S is read off the buffers each op's setup makes (so the count, the padding and
the per-phase messages are checked, not restated), for every variant the fake backend offers, at
several world sizes. A new op must add its row: the table and the registry must name the same ops."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from commbench.ops import registry
from commbench.run.harness import CollArgs
from tests.support.fakes import FakeBackend


def listed(x: Any) -> list[Any]:
    """A tensor, a list of tensors or None, as a list of tensors."""
    return [] if x is None else [x] if torch.is_tensor(x) else list(x)


def elements(x: Any) -> int:
    return sum(t.numel() for t in listed(x))


def _syncbn_bytes(args: CollArgs, phase: str) -> int:
    """The statistics (float64 for float64 inputs, else float32): the forward gathers count, mean and
    a spread (2C+1 values) from every rank, or all-reduces them once (allreduce); the backward
    all-reduces 2C values."""
    stat = 8 if args.dtype == torch.float64 else 4
    c, n = args.count, args.world_size
    forward = (2 * c + 1) * stat * (1 if args.variant == "allreduce" else n)
    backward = 2 * c * stat
    return {"forward": forward, "backward": backward, "forward_backward": forward + backward}[phase]


@dataclass(frozen=True)
class Row:
    s_elements: Callable[[CollArgs], int] | None  # S in elements of the dtype; None: s_bytes says it
    factor: Callable[[int], float] | None  # busbw = algbw x factor(n); None: latency only, no bandwidth
    follows_size: bool = True  # S is the requested size, to a whole element per rank
    options: dict[str, str] | None = None
    s_bytes: Callable[[CollArgs, str], int] | None = None


def gathered(n: int) -> float:
    return (n - 1) / n


def reduced(n: int) -> float:
    return 2 * (n - 1) / n


def unit(n: int) -> float:
    return 1.0


# Sizes of uneven gradients, so that a reduce-scatter pads them to a multiple of n.
TENSORS = {"tensors": "5,5,5,7,1,33,33,4,300"}

TABLE: dict[str, Row] = {
    "all_gather": Row(lambda a: elements(a.output), gathered),
    "reduce_scatter_base": Row(lambda a: elements(a.input), gathered),  # in place, the output is a view of it
    "all_reduce": Row(lambda a: elements(a.input), reduced),
    "all_to_all": Row(lambda a: elements(a.input), gathered),
    "broadcast": Row(lambda a: elements(a.input), unit),
    "reduce": Row(lambda a: elements(a.input), unit),
    "gather": Row(lambda a: elements(a.input) * a.world_size, gathered),
    "scatter": Row(lambda a: elements(a.output) * a.world_size, gathered),
    "sendrecv": Row(lambda a: elements(a.output), unit),
    "barrier": Row(lambda a: 0, None, follows_size=False),
    "grouped_all_gather": Row(lambda a: elements(a.input) * a.world_size, gathered, follows_size=False),
    # Every rank's shard of every gradient, padded to a multiple of n: the padded workload.
    "bucketed_reduce_scatter": Row(lambda a: elements(a.output) * a.world_size, gathered, False, TENSORS),
    "bucketed_all_reduce": Row(lambda a: elements(a.input), reduced, False, TENSORS),  # not padded
    "sync_bn": Row(None, unit, False, {"channels": "100", "batch": "2", "spatial": "1"}, _syncbn_bytes),
}

SIZE = 1 << 16


def test_the_table_names_every_registered_op():
    assert set(TABLE) == set(registry())


@pytest.mark.parametrize("n", [2, 3, 4, 8])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("name", sorted(TABLE))
def test_s_and_bus_factor(name, dtype, n):
    row = TABLE[name]
    op = registry()[name](row.options)
    factor = op.bus_factor(n)
    assert (factor is None) if row.factor is None else factor == pytest.approx(row.factor(n))
    element = torch.empty((), dtype=dtype).element_size()
    backend = FakeBackend(rank=n - 1, world_size=n)  # not the root, nor rank 0
    (point, *_) = op.points([SIZE])
    for variant in op.variants:
        if op.unavailable(variant, backend) is not None or op.dtype_unavailable(dtype) is not None:
            continue
        args = CollArgs(backend=backend, dtype=dtype, variant=variant)
        op.setup(args, point)
        for phase in op.phases:
            s = op.size_bytes(args, phase)
            expected = row.s_bytes(args, phase) if row.s_bytes else row.s_elements(args) * element
            assert s == expected, (variant, phase)
            if row.follows_size:
                assert abs(s - SIZE) < element * n, (variant, s)


def test_a_latency_only_op_measures_one_point_whatever_the_sizes():
    latency_only = [name for name, row in TABLE.items() if row.factor is None]
    assert latency_only == ["barrier"]
    for name in latency_only:
        assert len(registry()[name]().points([8, 1024, 1 << 20])) == 1
