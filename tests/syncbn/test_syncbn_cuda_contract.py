"""SyncBatchNorm's CUDA backward on the CPU, with the CUDA kernels faked by their contracts.

torch.batch_norm_backward_reduce and torch.batch_norm_backward_elemt exist only on CUDA. The fakes
here check what the CUDA sources require of their arguments (aten/src/ATen/native/cuda/
Normalization.cu and Normalization.cuh; docs/gpu.md lists them) and compute what the kernels compute,
so the CUDA path runs on the CPU: every random case of tests/syncbn/test_syncbn_fused.py must match the
plain reference through it, as through the CPU path, and one rank must match torch's BatchNorm.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from commbench.syncbn import STRATEGY_NAMES, SyncBatchNorm, function
from commbench.syncbn.stats import stat_dtype
from tests.syncbn.test_syncbn_fused import CASES, _check_case, _FullSizeOps, _layout

# Depends on torch's API: CI runs it again on the oldest torch it tests (.ci/run, -m torch_api).
pytestmark = pytest.mark.torch_api


def _dims(x: torch.Tensor) -> list[int]:
    return [0, *range(2, x.dim())]


def _col(v: torch.Tensor, ndim: int) -> torch.Tensor:
    return v.view(1, -1, *([1] * (ndim - 2)))


def _channels_last_kernel(t: torch.Tensor) -> bool:
    """batch_norm_use_channels_last_kernels (Normalization.cu): which form a kernel picks from one tensor."""
    return (t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last)) or (
        t.is_contiguous() and t.stride(1) == 1
    )


class FakeCudaKernels:
    """The two kernels as the CUDA build defines them, asserting their argument contracts."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def _common(self, dy: torch.Tensor, input: torch.Tensor, mean: torch.Tensor, invstd: torch.Tensor, weight: Any):
        channels = input.shape[1]
        assert mean is not None and invstd is not None, "mean and invstd must be defined"
        # TORCH_CHECK(mean_st == invstd_st); both are read as the accumulation type of input's
        assert mean.dtype == invstd.dtype == stat_dtype(input.dtype), (mean.dtype, invstd.dtype, input.dtype)
        assert mean.shape == invstd.shape == (channels,) and mean.is_contiguous() and invstd.is_contiguous()
        # weight is read as stat_scalar_t: the statistics' type when the input is a half type
        assert weight is None or (weight.dtype == mean.dtype and weight.shape == (channels,) and weight.is_contiguous())
        assert dy.dtype == input.dtype and dy.shape == input.shape
        # the channels_last form is chosen from one tensor and indexes the other alike
        assert dy.stride() == input.stride(), f"layouts differ: {dy.stride()} vs {input.stride()}"
        assert (
            input.is_contiguous()
            or _channels_last_kernel(input)
            or input.is_contiguous(memory_format=torch.channels_last_3d)
        ), "input must be contiguous in some memory format"
        assert input.numel() > 0, "the kernels are not called on an empty rank"

    def reduce(self, dy, input, mean, invstd, weight, input_g: bool, weight_g: bool, bias_g: bool):
        self.calls.append("batch_norm_backward_reduce")
        self._common(dy, input, mean, invstd, weight)
        # grad_weight_ = at::empty({n_input}, weight_.options()): undefined weight, no grad_weight
        assert weight is not None or not (weight_g or bias_g), "grad_weight/grad_bias asked for without a weight"
        x, g = input.double(), dy.double()
        sum_dy = g.sum(_dims(x))
        sum_dy_xmu = (g * (x - _col(mean.double(), x.dim()))).sum(_dims(x))
        return (
            sum_dy.to(mean.dtype) if input_g else None,
            sum_dy_xmu.to(mean.dtype) if input_g else None,
            (sum_dy_xmu * invstd.double()).to(weight.dtype) if weight_g else None,
            sum_dy.to(weight.dtype) if bias_g else None,
        )

    def elemt(self, dy, input, mean, invstd, weight, sum_dy, sum_dy_xmu, count):
        self.calls.append("batch_norm_backward_elemt")
        self._common(dy, input, mean, invstd, weight)
        assert sum_dy.dtype == sum_dy_xmu.dtype == mean.dtype
        # count.const_data_ptr<int>(): int32 counts on the device, summed for the normalisation
        assert count.dtype == torch.int32 and count.device == input.device and count.dim() == 1
        n = int(count.sum())
        x, g, nd = input.double(), dy.double(), input.dim()
        w = torch.ones_like(mean, dtype=torch.float64) if weight is None else weight.double()
        m, s = mean.double(), invstd.double()
        grad = (
            g - _col(sum_dy.double() / n, nd) - (x - _col(m, nd)) * _col(s * s * sum_dy_xmu.double() / n, nd)
        ) * _col(s * w, nd)
        fmt = torch.channels_last if nd == 4 and _channels_last_kernel(dy) else torch.contiguous_format
        return grad.to(input.dtype).contiguous(memory_format=fmt)


@pytest.fixture
def cuda_kernels(monkeypatch) -> FakeCudaKernels:
    fake = FakeCudaKernels()
    monkeypatch.setattr(function, "uses_cuda_kernels", lambda input: True)
    monkeypatch.setattr(torch, "batch_norm_backward_reduce", fake.reduce, raising=False)
    monkeypatch.setattr(torch, "batch_norm_backward_elemt", fake.elemt, raising=False)
    return fake


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
def test_the_cuda_path_matches_the_plain_reference_on_random_cases(strategy, cuda_kernels):
    torch.set_num_threads(1)
    failures = [f for case_no, case in enumerate(CASES) for f in _check_case(case_no, case, strategy)]
    assert not failures, "\n".join(failures[:30])
    assert {"batch_norm_backward_reduce", "batch_norm_backward_elemt"} <= set(cuda_kernels.calls)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "strided"])
@pytest.mark.parametrize("affine", [True, False])
def test_one_rank_through_the_cuda_path_equals_the_cpu_path_and_batchnorm(dtype, layout, affine, monkeypatch):
    """The same layer, input and gradient: through the faked CUDA kernels, through the CPU kernels,
    and torch.nn.BatchNorm2d in training mode; outputs and all three gradients agree."""
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(5)
    x0 = (torch.randn(4, 6, 5, 3, generator=g, dtype=torch.float64) * 2 + 1).to(dtype)
    dy0 = torch.randn(4, 6, 5, 3, generator=g, dtype=torch.float64).to(dtype)
    w0 = torch.rand(6, generator=g, dtype=torch.float64) + 0.5
    b0 = torch.randn(6, generator=g, dtype=torch.float64)
    param = torch.float64 if dtype == torch.float64 else torch.float32

    def run(layer: torch.nn.Module) -> dict[str, torch.Tensor]:
        layer = layer.to(param)
        if affine:
            with torch.no_grad():
                layer.weight.copy_(w0)
                layer.bias.copy_(b0)
        x = _layout(x0, layout).requires_grad_()
        y = layer(x)
        y.backward(_layout(dy0, layout))
        out = {"output": y, "grad_input": x.grad}
        if affine:
            out |= {"grad_weight": layer.weight.grad, "grad_bias": layer.bias.grad}
        return out

    cpu = run(SyncBatchNorm(6, affine=affine))
    reference = run(torch.nn.BatchNorm2d(6, affine=affine))
    fake = FakeCudaKernels()
    with monkeypatch.context() as m:
        m.setattr(function, "uses_cuda_kernels", lambda input: True)
        m.setattr(torch, "batch_norm_backward_reduce", fake.reduce, raising=False)
        m.setattr(torch, "batch_norm_backward_elemt", fake.elemt, raising=False)
        cuda = run(SyncBatchNorm(6, affine=affine))
    assert fake.calls == ["batch_norm_backward_reduce", "batch_norm_backward_elemt"]
    rtol, atol = {torch.float64: (1e-9, 1e-9), torch.float32: (1e-4, 1e-5)}.get(dtype, (2e-2, 6e-2))
    for key, value in cuda.items():
        assert value.dtype == cpu[key].dtype, key
        assert torch.allclose(value.double(), cpu[key].double(), rtol=rtol, atol=atol), key
        assert torch.allclose(value.double(), reference[key].double(), rtol=rtol, atol=atol), key


def test_the_cuda_path_never_calls_the_eval_backward_that_asserts_on_cuda(cuda_kernels):
    """batch_norm_backward_cuda's non-fused path (grad_input_mask[0] false) runs
    TORCH_INTERNAL_ASSERT(save_mean->defined()): the CUDA path must not call native_batch_norm_backward."""
    x = torch.randn(3, 4, 5, 5, requires_grad=True)
    bn = SyncBatchNorm(4)
    y = bn(x)
    with _FullSizeOps(x.numel()) as backward:
        y.backward(torch.randn_like(y))
    assert "native_batch_norm_backward" not in backward.ops
    assert cuda_kernels.calls == ["batch_norm_backward_reduce", "batch_norm_backward_elemt"]


@pytest.mark.parametrize("wants", [(True, False, False), (False, True, True), (True, True, False)])
def test_the_cuda_path_asks_only_for_the_gradients_autograd_needs(wants, cuda_kernels, monkeypatch):
    """input_g, weight_g, bias_g follow needs_input_grad, as torch.nn.SyncBatchNorm passes them."""
    seen: list[tuple[bool, bool, bool]] = []
    reduce = cuda_kernels.reduce

    def spy(dy, input, mean, invstd, weight, input_g, weight_g, bias_g):
        seen.append((input_g, weight_g, bias_g))
        return reduce(dy, input, mean, invstd, weight, input_g, weight_g, bias_g)

    monkeypatch.setattr(torch, "batch_norm_backward_reduce", spy)
    bn = SyncBatchNorm(4)
    bn.weight.requires_grad_(wants[1])
    bn.bias.requires_grad_(wants[2])
    x = torch.randn(3, 4, 2, 2, requires_grad=wants[0])
    bn(x).sum().backward()
    assert seen == [wants]
    assert (x.grad is not None) == wants[0]
    assert (bn.weight.grad is not None, bn.bias.grad is not None) == wants[1:]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the real CUDA kernels need a GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "strided"])
@pytest.mark.parametrize("affine", [True, False])
def test_on_a_gpu_the_real_kernels_give_batchnorms_outputs_and_gradients(dtype, layout, affine):
    """The GPU check's SyncBatchNorm step: the CUDA path with torch's own kernels, one rank, against
    torch.nn.BatchNorm2d on the same GPU (and so against the faked kernels' contracts above)."""
    g = torch.Generator().manual_seed(7)
    x0 = (torch.randn(8, 16, 7, 5, generator=g, dtype=torch.float64) * 2 + 1).to(dtype).cuda()
    dy0 = torch.randn(8, 16, 7, 5, generator=g, dtype=torch.float64).to(dtype).cuda()
    param = torch.float64 if dtype == torch.float64 else torch.float32
    results = []
    for layer in (SyncBatchNorm(16, affine=affine), torch.nn.BatchNorm2d(16, affine=affine)):
        layer = layer.to(device="cuda", dtype=param)
        x = _layout(x0, layout).requires_grad_()
        y = layer(x)
        y.backward(_layout(dy0, layout))
        grads = [layer.weight.grad, layer.bias.grad] if affine else []
        results.append([y, x.grad, *grads, layer.running_mean, layer.running_var])
    rtol, atol = {torch.float64: (1e-9, 1e-9), torch.float32: (1e-4, 1e-4)}.get(dtype, (2e-2, 6e-2))
    for ours, theirs in zip(*results):
        assert ours.dtype == theirs.dtype
        assert torch.allclose(ours.double(), theirs.double(), rtol=rtol, atol=atol)


def test_the_count_tensor_is_made_once_per_case_not_in_every_backward(cuda_kernels, monkeypatch):
    """torch.tensor from a Python int is a pageable host-to-device copy on CUDA: every timed backward
    of one case (one count) must hand the kernel the same tensor, made before."""
    seen = []
    elemt = cuda_kernels.elemt

    def spy(dy, input, mean, invstd, weight, sum_dy, sum_dy_xmu, count):
        seen.append(count)
        return elemt(dy, input, mean, invstd, weight, sum_dy, sum_dy_xmu, count)

    monkeypatch.setattr(torch, "batch_norm_backward_elemt", spy)
    function.count_tensor.cache_clear()
    bn = SyncBatchNorm(4)
    for shape in ((3, 4, 2, 2), (3, 4, 2, 2), (3, 4, 2, 2), (5, 4, 2, 2)):  # a second case: another count
        bn(torch.randn(*shape, requires_grad=True)).sum().backward()
    assert seen[0] is seen[1] is seen[2] and seen[3] is not seen[0]
    assert [int(c.sum()) for c in (seen[0], seen[3])] == [12, 20]
