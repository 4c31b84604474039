"""S (the bytes one iteration moves) and the bus factor of every registered op, as nccl-tests defines
them, from one table (tests/support/op_table.py): S is read off the buffers each op's setup makes
(so the count, the padding and the per-phase messages are checked, not restated), for every variant
the fake backend offers, at several world sizes. A new op must add its row: the table and the
registry must name the same ops."""

from __future__ import annotations

import pytest
import torch

from commbench.ops import registry
from commbench.ops.args import CollArgs
from tests.support.fakes import FakeBackend
from tests.support.op_table import TABLE

SIZE = 1 << 16


def test_the_table_names_every_registered_op():
    assert set(TABLE) == set(registry())


@pytest.mark.parametrize("name", sorted(TABLE))
def test_s_and_bus_factor(name):
    row = TABLE[name]
    op = registry()[name](row.options)
    (point, *_) = op.points([SIZE])
    for n in (2, 3, 4, 8):
        factor = op.bus_factor(n)
        assert (factor is None) if row.factor is None else factor == pytest.approx(row.factor(n)), n
        backend = FakeBackend(rank=n - 1, world_size=n)  # not the root, nor rank 0
        # Every world size in float32; the element sizes (and sync_bn's float32 statistics for
        # bfloat16) at an odd one.
        for dtype in (torch.float32, torch.bfloat16, torch.float64) if n == 3 else (torch.float32,):
            element = torch.empty((), dtype=dtype).element_size()
            for variant in op.variants:
                if op.unavailable(variant, backend) is not None or op.dtype_unavailable(dtype) is not None:
                    continue
                args = CollArgs(backend=backend, dtype=dtype, variant=variant)
                op.setup(args, point)
                for phase in op.phases:
                    s = op.size_bytes(args, phase)
                    expected = row.s_bytes(args, phase) if row.s_bytes else row.s_elements(args) * element
                    assert s == expected, (n, dtype, variant, phase)
                    if row.follows_size:
                        assert abs(s - SIZE) < element * n, (n, dtype, variant, s)


def test_a_latency_only_op_measures_one_point_whatever_the_sizes():
    latency_only = [name for name, row in TABLE.items() if row.factor is None]
    assert latency_only == ["barrier"]
    for name in latency_only:
        assert len(registry()[name]().points([8, 1024, 1 << 20])) == 1
