"""sync_bn: one SyncBatchNorm layer's forward, backward, or both, per communication strategy.

Input (N per rank, C, H, W), swept over C. Each rank's input is deterministic and rank-dependent,
so every rank can build the whole batch and a float64 torch.nn.BatchNorm2d reference of it; the
check counts output, grad_input, local grad_weight/grad_bias and running-statistics elements
outside the dtype's tolerance. The layer waits on its own wait objects (it needs the gathered
statistics to go on), so the harness's completion step only synchronises the device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch

from commbench.errors import UserError
from commbench.harness import CollArgs
from commbench.ops.base import Op, count_wrong
from commbench.ops.options import BATCH, CHANNELS, SPATIAL, split_list
from commbench.syncbn import NATIVE_VARIANTS, STRATEGY_NAMES, SyncBatchNorm
from commbench.syncbn.stats import reduce_dims, stat_dtype
from commbench.syncbn.strategies import STRATEGIES

NATIVE_TORCH, NATIVE_HOROVOD = NATIVE_VARIANTS
# The messages of the native layers are those of the strategy they implement (for S).
_NATIVE_PATTERN = {NATIVE_TORCH: "torch", NATIVE_HOROVOD: "horovod"}
DEFAULT_CHANNELS = (32, 256, 2048)
DEFAULT_BATCH, DEFAULT_SPATIAL = 4, 8
# (rtol, atol) against the float64 reference; half types are stored rounded to 8 or 11 bits.
_TOLERANCE = {torch.float64: (1e-8, 1e-8), torch.float32: (1e-3, 1e-4),
              torch.float16: (1e-2, 2e-2), torch.bfloat16: (2e-2, 8e-2)}  # fmt: skip


def _positive_int(options: Mapping[str, str], key: str, default: int) -> int:
    text = options.get(key)
    if not text:
        return default
    try:
        value = int(str(text))
    except ValueError:
        value = 0
    if value < 1:
        raise UserError(f"--{key} {text!r} must be a whole number >= 1")
    return value


def _channels(options: Mapping[str, str]) -> tuple[int, ...]:
    items = split_list(options.get(CHANNELS, "")) or [str(c) for c in DEFAULT_CHANNELS]
    channels = []
    for item in items:
        if not item.isdigit() or int(item) < 1:
            raise UserError(f"--channels {item!r} is not a channel count: give whole numbers >= 1 such as 32,256,2048")
        channels.append(int(item))
    return tuple(sorted(set(channels)))


@dataclass
class _Layer:
    """The op-private state: the layer, the leaf input, the last output, and the grad to feed back."""

    module: torch.nn.Module
    x: torch.Tensor
    dy: torch.Tensor
    x_value: torch.Tensor
    y: torch.Tensor | None = None


class SyncBN(Op):
    """Every SyncBatchNorm strategy of commbench.syncbn, plus the native CUDA layers where they run."""

    name = "sync_bn"
    variants = (*STRATEGY_NAMES, NATIVE_TORCH, NATIVE_HOROVOD)
    phases = ("forward", "backward", "forward_backward")

    def __init__(self, options: Mapping[str, str] | None = None) -> None:
        super().__init__(options)
        self.channels = _channels(self.options)
        self.batch = _positive_int(self.options, BATCH, DEFAULT_BATCH)
        self.spatial = _positive_int(self.options, SPATIAL, DEFAULT_SPATIAL)
        if self.batch * self.spatial**2 < 2:
            raise UserError("sync_bn needs at least 2 values per channel per rank: raise --batch or --spatial")

    def unavailable(self, variant: str, backend: Any) -> str | None:
        if variant == "horovod_grouped":
            return backend.group_unavailable()
        if variant == NATIVE_TORCH and backend.device.type != "cuda":
            return "torch.nn.SyncBatchNorm refuses CPU tensors (needs CUDA and a GPU backend)"
        if variant == NATIVE_HOROVOD and (backend.name != "horovod" or backend.device.type != "cuda"):
            return "hvd.SyncBatchNorm needs the horovod backend on CUDA"
        return None

    def dtype_unavailable(self, dtype: torch.dtype) -> str | None:
        if not dtype.is_floating_point:
            return f"batch norm needs a floating dtype (float32, float64, float16, bfloat16), not {str(dtype).removeprefix('torch.')}"
        return None

    def sizes(self, requested: Any) -> tuple[int, ...]:
        """The channel counts C: this op's workload is set by --channels, not by byte sizes."""
        return self.channels

    def memory_bytes(self, size_bytes: int, world_size: int) -> int:
        # size_bytes is a channel count here. Per rank: x, y, dy, grad (and float copies), plus
        # the whole batch in float64 for the reference, with its output and grad.
        elements = self.batch * size_bytes * self.spatial**2
        return elements * 8 * (8 + 3 * world_size)

    def setup(self, args: CollArgs, size_bytes: int) -> None:
        channels = args.count = size_bytes
        module = self._module(args, channels)
        inputs = [self._inputs(r, channels, args.dtype) for r in range(args.world_size)]
        x_value, dy = (t.to(args.device) for t in inputs[args.rank])
        x = x_value.clone().requires_grad_()
        args.state = _Layer(module, x, dy, x_value)
        args.expected = {k: v.to(args.device) for k, v in self._reference(inputs, args.rank, module).items()}

    def _module(self, args: CollArgs, channels: int) -> torch.nn.Module:
        if args.variant == NATIVE_TORCH:
            module: torch.nn.Module = torch.nn.SyncBatchNorm(channels)
        elif args.variant == NATIVE_HOROVOD:
            import horovod.torch as hvd

            module = hvd.SyncBatchNorm(channels)
        else:
            module = SyncBatchNorm(channels, strategy=args.variant, process_group=args.backend)
        # Distinct per-channel weights and biases, so a mixed-up channel cannot pass the check.
        with torch.no_grad():
            module.weight.copy_(1 + torch.arange(channels) % 7 / 8)
            module.bias.copy_(torch.arange(channels) % 5 / 4 - 0.5)
        return module.to(device=args.device, dtype=torch.float64 if args.dtype == torch.float64 else torch.float32)

    def _inputs(self, rank: int, channels: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Rank r's input (scaled and shifted by r, so ranks differ in mean and variance) and grad_output."""
        g = torch.Generator().manual_seed(7919 * rank + channels)
        shape = (self.batch, channels, self.spatial, self.spatial)
        x = torch.randn(shape, generator=g) * (1 + 0.25 * rank) + 0.5 * rank
        return x.to(dtype), torch.randn(shape, generator=g).to(dtype)

    def _reference(self, inputs: list[tuple[torch.Tensor, torch.Tensor]], rank: int, module: torch.nn.Module) -> dict[str, torch.Tensor]:
        """torch.nn.BatchNorm2d in float64 on every rank's batch; this rank's slice of its results."""
        ref = torch.nn.BatchNorm2d(module.num_features, eps=module.eps, momentum=module.momentum).double()
        ref.load_state_dict({k: v.detach().cpu() for k, v in module.state_dict().items()})
        x_all = torch.cat([x for x, _ in inputs]).double().requires_grad_()
        y_all = ref(x_all)
        y_all.backward(torch.cat([dy for _, dy in inputs]).double())
        mine = slice(rank * self.batch, (rank + 1) * self.batch)
        x, dy = (t.double() for t in inputs[rank])
        dims = reduce_dims(x)
        # This rank's own grad_weight / grad_bias (not summed over ranks), as the layers leave them.
        x_hat = (y_all[mine].detach() - ref.bias.view(1, -1, 1, 1)) / ref.weight.view(1, -1, 1, 1)
        return {
            "output": y_all[mine].detach(), "grad_input": x_all.grad[mine],
            "grad_weight": (dy * x_hat.detach()).sum(dims), "grad_bias": dy.sum(dims),
            "running_mean": ref.running_mean, "running_var": ref.running_var,
        }  # fmt: skip

    def fill(self, args: CollArgs) -> None:
        layer: _Layer = args.state
        with torch.no_grad():
            layer.x.copy_(layer.x_value)
        layer.module.reset_running_stats()
        layer.x.grad, layer.y = None, None
        layer.module.zero_grad(set_to_none=True)

    def before(self, args: CollArgs, phase: str) -> None:
        layer: _Layer = args.state
        layer.x.grad = None
        layer.module.zero_grad(set_to_none=True)
        if phase == "backward":  # the forward whose backward is timed runs untimed
            layer.y = layer.module(layer.x)

    def issue(self, args: CollArgs, phase: str) -> None:
        layer: _Layer = args.state
        if phase != "backward":
            layer.y = layer.module(layer.x)
        if phase != "forward":
            # The graph is kept, so that nonblocking mode may run several backwards of one forward.
            layer.y.backward(layer.dy, retain_graph=phase == "backward")

    def wrong(self, args: CollArgs, phase: str) -> int:
        layer: _Layer = args.state
        tol = _TOLERANCE[args.dtype]
        stat_tol = _TOLERANCE[stat_dtype(args.dtype)]
        found = {"running_mean": layer.module.running_mean, "running_var": layer.module.running_var}
        if phase != "backward":
            found["output"] = layer.y
        if phase != "forward":
            found.update(grad_input=layer.x.grad, grad_weight=layer.module.weight.grad, grad_bias=layer.module.bias.grad)
        wrong = 0
        for key, actual in found.items():
            expected = args.expected[key]
            if actual is None:
                wrong += expected.numel()
            else:
                wrong += count_wrong(actual.detach(), expected, tol if key in ("output", "grad_input") else stat_tol)
        return wrong

    def size_bytes(self, args: CollArgs, phase: str) -> int:
        strategy = STRATEGIES[_NATIVE_PATTERN.get(args.variant, args.variant)]
        stat_bytes = torch.empty((), dtype=stat_dtype(args.dtype)).element_size()
        forward = strategy.forward_bytes(args.count, args.world_size, stat_bytes)
        backward = strategy.backward_bytes(args.count, args.world_size, stat_bytes)
        return {"forward": forward, "backward": backward}.get(phase, forward + backward)

    def bus_factor(self, world_size: int) -> float:
        # A phase mixes all-gathers and all-reduces, which have no one nccl-tests factor: busbw = algbw.
        return 1.0
