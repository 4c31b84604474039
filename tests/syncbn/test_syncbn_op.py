"""The sync_bn op on real Gloo ranks (every variant and phase checks out, a corrupted result is caught),
its options, SyncBatchNorm's one-line errors, `commbench syncbn` end to end, and where the native
layers are offered and how their calls are counted."""

from __future__ import annotations

import dis
import importlib
from collections import Counter
from types import SimpleNamespace

import pytest
import torch

from commbench.errors import UserError
from commbench.ops import choose_variants
from commbench.ops.args import CollArgs
from commbench.ops.sync_bn import NATIVE_HOROVOD, NATIVE_TORCH, SyncBN
from commbench.run.harness import measure
from commbench.run.watchdog import Watchdog
from commbench.syncbn import SyncBatchNorm
from commbench.syncbn.instrument import native_calls, recording
from commbench.syncbn.strategies import STRATEGIES
from tests.support.distributed import commbench, run_ranks

# Depends on torch's API: CI runs it again on the oldest torch it tests (.ci/run, -m torch_api).
pytestmark = pytest.mark.torch_api


def _measure_all(backend, op_cls, options, dtypes):
    torch.set_num_threads(1)  # small tensors: threads would only fight the other rank for cores
    op = op_cls(options)
    rows = []
    wanted = [v for v in options.get("variant", "").split(",") if v]
    for variant in choose_variants(op.variants, wanted):
        if (reason := op.unavailable(variant, backend)) is not None:
            rows.append((variant, "unavailable", reason, None, None, None))
            continue
        for dtype in dtypes:
            for point in op.points([]):
                args = CollArgs(backend=backend, dtype=getattr(torch, dtype), variant=variant)
                op.setup(args, point)
                for phase in op.phases:
                    m = measure(
                        op,
                        args,
                        phase,
                        iters=2,
                        warmup=1,
                        window=1,
                        check=True,
                        watchdog=Watchdog(60, backend.rank),
                        label="test",
                    )
                    rows.append((variant, phase, dtype, m.wrong, m.calls, op.size_bytes(args, phase)))
    return rows


@pytest.mark.slow
def test_every_variant_and_phase_is_correct_with_the_declared_calls_and_bytes():
    rows = run_ranks(
        _measure_all, 2, SyncBN, {"channels": "3,16", "batch": "2", "spatial": "3"}, ("float32", "float64", "bfloat16")
    )[0]
    measured = [r for r in rows if r[1] != "unavailable"]
    assert {r[0] for r in measured} == set(STRATEGIES)
    assert len(measured) == 6 * 3 * 2 * 3
    for variant, phase, dtype, wrong, calls, _s_bytes in measured:
        assert wrong == 0, (variant, phase, dtype)
        spec = STRATEGIES[variant]
        expected_calls = {"forward": spec.forward_calls, "backward": spec.backward_calls}
        assert calls == expected_calls.get(phase, spec.forward_calls + spec.backward_calls), (variant, phase)
    unavailable = {r[0]: r[2] for r in rows if r[1] == "unavailable"}
    assert "CPU" in unavailable["native_torch"] and "horovod" in unavailable["native_horovod"]


class CorruptedSyncBN(SyncBN):
    """Normalises correctly, then nudges one output element and one grad_input element."""

    def issue(self, args, phase):
        super().issue(args, phase)
        with torch.no_grad():
            if phase != "backward":
                args.state.y[0, 0, 0, 0] += 0.01
            if phase != "forward":
                args.state.x.grad[-1, -1, -1, -1] += 0.01


@pytest.mark.slow
def test_a_corrupted_sync_bn_result_is_caught():
    rows = run_ranks(
        _measure_all,
        2,
        CorruptedSyncBN,
        {"channels": "4", "batch": "2", "spatial": "2", "variant": "horovod"},
        ("float32",),
    )[0]
    wrong = {phase: w for _, phase, _, w, _, _ in rows}
    # One element per rank per corrupted tensor, summed over the two ranks.
    assert wrong == {"forward": 2, "backward": 2, "forward_backward": 4}


@pytest.mark.parametrize(
    "options, message",
    [
        ({"channels": "32,x"}, "--channels 'x' is not a channel count"),
        ({"channels": "0"}, "--channels '0' is not a channel count"),
        ({"batch": "-1"}, "--batch '-1' is not a sample count: give a whole number >= 1"),
        ({"spatial": "two"}, "--spatial 'two' is not a height: give a whole number >= 1"),
        ({"batch": "1", "spatial": "1"}, "at least 2 values per channel per rank"),
    ],
)
def test_bad_op_options_are_one_line_errors(options, message):
    with pytest.raises(UserError) as info:
        SyncBN(options)
    assert message in info.value.format_message() and "\n" not in info.value.format_message()


def _bad_input_message(case: str) -> str:
    make = {
        "channels": lambda: SyncBatchNorm(4)(torch.randn(2, 3, 5)),
        "1D": lambda: SyncBatchNorm(4)(torch.randn(4)),
        "6D": lambda: SyncBatchNorm(4)(torch.randn(1, 4, 1, 1, 1, 1)),
        "strategy": lambda: SyncBatchNorm(4, strategy="nccl"),
        "one value": lambda: SyncBatchNorm(4)(torch.randn(1, 4)),
    }[case]
    try:
        make()
    except ValueError as exc:
        return str(exc)
    return "no ValueError"


@pytest.mark.parametrize(
    "case, message",
    [
        ("channels", "expected 4 channels in dim 1 of the input, got 3"),
        ("1D", "expected 2D to 5D input (got 1D input)"),
        ("6D", "expected 2D to 5D input (got 6D input)"),
        ("strategy", "unknown SyncBatchNorm strategy 'nccl'; valid strategies: torch, torch_legacy"),
        ("one value", "Expected more than 1 value per channel when training, got 1"),
    ],
)
def test_bad_input_is_a_one_line_value_error(case, message):
    text = _bad_input_message(case)
    assert message in text and "\n" not in text


def test_single_process_eval_and_state_dict_follow_batchnorm():
    _eval_and_state_dict()


def _eval_and_state_dict():
    ref = torch.nn.BatchNorm2d(3)
    ours = SyncBatchNorm(3, strategy="apex")
    ours.load_state_dict(ref.state_dict())
    assert set(ours.state_dict()) == set(ref.state_dict())
    x = torch.randn(4, 3, 2, 2)
    assert torch.allclose(ours(x), ref(x), atol=1e-6)
    assert torch.allclose(ours.running_var, ref.running_var) and int(ours.num_batches_tracked) == 1
    ours.eval(), ref.eval()
    assert torch.allclose(ours(x), ref(x), atol=1e-6)
    one = torch.randn(1, 3, 1, 1)  # one value per channel is fine in eval: running statistics are used
    assert torch.allclose(ours(one), ref(one), atol=1e-6)


@pytest.mark.slow
def test_syncbn_command_prints_the_comparison_and_charts_it(tmp_path):
    out = tmp_path / "sbn.csv"
    run = commbench(
        *"syncbn --nproc 2 --channels 4,8 --batch 2 --spatial 2 -n 2 -w 1 --strategy horovod,apex --strategy allreduce -o".split(),
        str(out),
        env={"OMP_NUM_THREADS": "1"},
    )
    assert run.returncode == 0, run.stderr
    assert "speedup over horovod" in run.stdout
    table = [line.split() for line in run.stdout.splitlines() if line.startswith("  forward ")]
    times, ratios = table[:2], table[2:4]
    assert [row[1] for row in times] == ["4", "8"] and all(row[2].isdigit() for row in times)
    # each strategy's speedup with its interval: "1.57x (0.38x-6.4x)", or "(<0.01x to >100x)" from 2 samples
    assert all(row[2].endswith("x") and row[3].startswith("(") and " ".join(row).count("x)") == 2 for row in ratios)
    assert "# overall (forward_backward): " in run.stdout
    for phase in ("forward", "backward", "forward_backward"):
        assert (tmp_path / "sbn-charts" / f"sync_bn-{phase}-speedup.png").stat().st_size > 0

    import pandas as pd

    rows = pd.read_csv(out)
    assert set(rows["variant"]) == {"horovod", "apex", "allreduce"} and set(rows["status"]) == {"ok"}
    assert len(rows) == 3 * 2 * 3 and (rows["wrong"] == 0).all()
    calls = rows.set_index(["variant", "phase"])["calls"].groupby(level=[0, 1]).first()
    assert (calls["horovod", "forward"], calls["horovod", "backward"], calls["apex", "forward_backward"]) == (3, 2, 2)


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv, message",
    [
        (("syncbn", "--strategy", "torch,nccl"), "unknown strategy 'nccl'; valid strategies: torch, torch_legacy"),
        (("syncbn", "--channels", "32,-1"), "--channels '-1' is not a channel count"),
        (("sweep", "--op", "sync_bn", "--batch", "0"), "--batch '0' is not a sample count: give a whole number >= 1"),
    ],
)
def test_bad_command_lines_are_one_line_errors(argv, message):
    run = commbench(*argv, timeout=60)
    assert run.returncode == 2
    assert message in run.stderr and len(run.stderr.strip().splitlines()) == 1


# -- the native layers: where they are offered, and their calls counted as they are made ---------------


def _fake_backend(name: str, device: str, torch_process_group: bool) -> SimpleNamespace:
    return SimpleNamespace(
        name=name,
        device=torch.device(device),
        torch_process_group=torch_process_group,
        group_unavailable=lambda: None,
    )


NATIVE_GATES = [
    ("nccl", "cuda", True, None, "hvd.SyncBatchNorm needs the horovod backend on CUDA"),
    ("gloo", "cpu", True, "refuses CPU tensors", "hvd.SyncBatchNorm needs the horovod backend on CUDA"),
    # Horovod on CUDA has no torch process group: torch's layer would silently run a local batch norm.
    ("horovod", "cuda", False, "needs a torch.distributed process group, which the horovod backend has not", None),
    ("horovod", "cpu", False, "refuses CPU tensors", "hvd.SyncBatchNorm needs the horovod backend on CUDA"),
]


@pytest.mark.parametrize("backend, device, group, torch_reason, horovod_reason", NATIVE_GATES)
def test_each_native_layer_is_offered_only_where_it_communicates(backend, device, group, torch_reason, horovod_reason):
    op = SyncBN()
    fake = _fake_backend(backend, device, group)
    for variant, reason in ((NATIVE_TORCH, torch_reason), (NATIVE_HOROVOD, horovod_reason)):
        found = op.unavailable(variant, fake)
        assert found is None if reason is None else reason in found, (variant, found)


class _Recorder:
    """Backend.record's bookkeeping alone."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.issued = 0

    def record(self, api: str) -> None:
        self.calls[api] += 1
        self.issued += 1


def test_a_native_layers_collectives_are_recorded_as_they_are_made(monkeypatch):
    seen = []
    monkeypatch.setattr(torch.distributed, "all_reduce", lambda *a, **k: seen.append((a, k)) or "work")
    fake_all_reduce = torch.distributed.all_reduce
    backend = _Recorder()
    with recording(NATIVE_TORCH, backend):
        assert torch.distributed.all_reduce is not fake_all_reduce
        assert torch.distributed.all_reduce("t", group="g", async_op=False) == "work"  # passed through
        torch.distributed.all_reduce("u")
    assert backend.calls == {"all_reduce": 2} and backend.issued == 2
    assert seen == [(("t",), {"group": "g", "async_op": False}), (("u",), {})]
    assert torch.distributed.all_reduce is fake_all_reduce  # restored
    with recording("torch", backend):  # commbench's own strategies record through the backend already
        assert torch.distributed.all_reduce is fake_all_reduce


def test_the_layers_functions_are_restored_when_the_layer_raises(monkeypatch):
    names = native_calls(NATIVE_TORCH)[1]  # every torch's names: this one has some of them
    originals = {name: getattr(torch.distributed, name) for name in names if hasattr(torch.distributed, name)}
    with pytest.raises(ValueError, match="layer failed"), recording(NATIVE_TORCH, _Recorder()):
        raise ValueError("layer failed")
    assert {name: getattr(torch.distributed, name) for name in originals} == originals


def _called_names(fn) -> set[str]:
    """Global and attribute names a function's code looks up."""
    return set(fn.__code__.co_names)


def test_torch_sync_batch_norm_calls_only_collectives_that_are_recorded():
    """torch.nn.SyncBatchNorm looks its collectives up on torch.distributed at each call: what a
    torch upgrade adds there must be added to native_calls, or the rows would undercount."""
    from torch.nn.modules import _functions

    module_name, names = native_calls(NATIVE_TORCH)
    assert _functions.dist is importlib.import_module(module_name)
    collectives = {n for n in dir(torch.distributed) if n.lstrip("_").startswith(("all_", "reduce", "broadcast"))}
    forward = _called_names(_functions.SyncBatchNorm.forward) & collectives
    backward = _called_names(_functions.SyncBatchNorm.backward) & collectives
    assert forward and forward <= set(names), forward
    assert backward == {"all_reduce"}
    # The flat all-gather it calls is the one the backends resolve (the newest name this torch has:
    # all_gather_into_tensor on 2.11, all_gather_single on 2.13), which tests/backends/test_nccl.py expects.
    from commbench.backends.torch_dist import FLAT_ALL_GATHER, resolve_api

    assert forward & set(FLAT_ALL_GATHER) == {resolve_api(FLAT_ALL_GATHER)}, forward


def test_horovod_sync_batch_norm_makes_the_calls_of_the_horovod_strategy():
    sync_batch_norm = pytest.importorskip("horovod.torch.sync_batch_norm")
    module_name, names = native_calls(NATIVE_HOROVOD)
    assert sync_batch_norm.__name__ == module_name
    layer = sync_batch_norm._SyncBatchNorm
    for fn, calls in ((layer.forward, {"allgather_async": 3}), (layer.backward, {"allreduce_async": 2})):
        loads = Counter(i.argval for i in dis.get_instructions(fn) if i.opname == "LOAD_GLOBAL")
        async_calls = {name: n for name, n in loads.items() if name.endswith("_async")}
        assert async_calls == calls and set(async_calls) <= set(names)
    strategy = STRATEGIES["horovod"]  # its S and the declared calls describe the native layer's messages
    assert (strategy.forward_calls, strategy.backward_calls) == (3, 2)
