"""sync_bn: one SyncBatchNorm layer's forward, backward, or both, per communication strategy.

Input (N per rank, C, H, W), swept over C. Each rank's input is deterministic and rank-dependent,
so every rank can build the whole batch and a float64 torch.nn.BatchNorm2d reference of it; the
check counts output, grad_input, local grad_weight/grad_bias and running-statistics elements
outside the dtype's tolerance. The layer waits on its own wait objects (it needs the gathered
statistics to go on), so the harness's completion step only synchronises the device.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from commbench.errors import UserError
from commbench.lazy import torch
from commbench.ops.base import IssueOp
from commbench.ops.check import count_wrong
from commbench.ops.memory import MemoryCase
from commbench.ops.options import Listed, OpOption, Whole
from commbench.ops.spec import BusFactor, OpSpec, Point
from commbench.syncbn import NATIVE_VARIANTS, STRATEGY_NAMES
from commbench.syncbn.instrument import recording

if TYPE_CHECKING:
    from commbench.ops.args import CollArgs

NATIVE_TORCH, NATIVE_HOROVOD = NATIVE_VARIANTS
# The messages of the native layers are those of the strategy they implement (for S).
_NATIVE_PATTERN = {NATIVE_TORCH: "torch", NATIVE_HOROVOD: "horovod"}
CHANNELS = OpOption(
    "--channels",
    "sync_bn: channel counts C to sweep, comma-separated.",
    Listed(Whole(1, "a channel count", "whole numbers >= 1 such as 32,256,2048"), sort=True),
    default=(32, 256, 2048),
)
BATCH = OpOption("--batch", "sync_bn: samples per rank N.", Whole(1, "a sample count"), default=4)
SPATIAL = OpOption("--spatial", "sync_bn: height = width of the (N, C, H, W) input.", Whole(1, "a height"), default=8)


def _tolerance(dtype: Any) -> tuple[float, float]:
    """(rtol, atol) against the float64 reference; half types are stored rounded to 8 or 11 bits."""
    return {
        torch.float64: (1e-8, 1e-8),
        torch.float32: (1e-3, 1e-4),
        torch.float16: (1e-2, 2e-2),
        torch.bfloat16: (2e-2, 8e-2),
    }[dtype]


@dataclass
class _Layer:
    """The op-private state: the layer, the leaf input, the last output, and the grad to feed back."""

    module: Any  # torch.nn.Module
    x: Any
    dy: Any
    x_value: Any
    y: Any = None


class SyncBN(IssueOp):
    """Every SyncBatchNorm strategy of commbench.syncbn, plus the native CUDA layers where they run."""

    spec = OpSpec(
        name="sync_bn",
        summary="one SyncBatchNorm layer on (N per rank, C, H, W) input, swept over C (--channels, --batch, "
        "--spatial); phases forward, backward, forward_backward; the count column is C (native_torch and "
        "native_horovod run on CUDA only)",
        s_definition="S = bytes the phase communicates, each call counted as nccl-tests does (all-gather: gathered "
        "output; all-reduce: buffer), statistics 4 bytes each (8 for float64): forward (2C+1) x 4 x n for the "
        "gathering strategies, (2C+1) x 4 for allreduce; backward 2C x 4; forward_backward the sum",
        bus_factor=BusFactor("1 (busbw = algbw: a phase mixes gathers and reduces)", lambda n: 1.0),
        variants=(*STRATEGY_NAMES, NATIVE_TORCH, NATIVE_HOROVOD),
        phases=("forward", "backward", "forward_backward"),
        baseline="horovod",
        workload_column="count",
        workload_name="channels C",
        workload_knobs="--channels, --batch or --spatial",
        options=(CHANNELS, BATCH, SPATIAL),
        completes_internally=lambda variant: True,  # the layer waits for its statistics before it can normalise
    )

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.channels: tuple[int, ...] = self.value(CHANNELS)
        self.batch: int = self.value(BATCH)
        self.spatial: int = self.value(SPATIAL)
        if self.batch * self.spatial**2 < 2:
            raise UserError("sync_bn needs at least 2 values per channel per rank: raise --batch or --spatial")

    def unavailable(self, variant: str, backend: Any) -> str | None:
        if variant == "horovod_grouped":
            return backend.group_unavailable()
        if variant == NATIVE_TORCH and backend.device.type != "cuda":
            return "torch.nn.SyncBatchNorm refuses CPU tensors (needs CUDA and a GPU backend)"
        if variant == NATIVE_TORCH and not backend.torch_process_group:
            # Without a torch process group it would fall back to a local batch norm: no communication.
            return f"torch.nn.SyncBatchNorm needs a torch.distributed process group, which the {backend.name} backend has not"
        if variant == NATIVE_HOROVOD and (backend.name != "horovod" or backend.device.type != "cuda"):
            return "hvd.SyncBatchNorm needs the horovod backend on CUDA"
        return None

    def dtype_unavailable(self, dtype: Any) -> str | None:
        if not dtype.is_floating_point:
            return f"batch norm needs a floating dtype (float32, float64, float16, bfloat16), not {str(dtype).removeprefix('torch.')}"
        return None

    def points(self, requested: Sequence[int]) -> list[Point]:
        """The channel counts C: this op's workload is set by --channels, not by byte sizes."""
        return [Point(f"C={c}", 0, {"channels": c}) for c in self.channels]

    def memory_bytes(self, case: MemoryCase, point: Point) -> int:
        # Per rank: x, y, dy, grad (and float copies), plus the whole batch in float64 for the
        # reference, with its output and grad.
        elements = self.batch * point.params["channels"] * self.spatial**2
        return elements * 8 * (8 + 3 * case.world_size)

    def setup(self, args: CollArgs, point: Point) -> None:
        channels = args.count = point.params["channels"]
        module = self._module(args, channels)
        inputs = [self._inputs(r, channels, args.dtype) for r in range(args.world_size)]
        x_value, dy = (t.to(args.device) for t in inputs[args.rank])
        x = x_value.clone().requires_grad_()
        args.state = _Layer(module, x, dy, x_value)
        args.expected = {k: v.to(args.device) for k, v in self._reference(inputs, args.rank, module).items()}

    def _module(self, args: CollArgs, channels: int) -> Any:
        from commbench.syncbn import SyncBatchNorm

        if args.variant == NATIVE_TORCH:
            module = torch.nn.SyncBatchNorm(channels, process_group=args.backend.group)  # the --group's ranks
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

    def _inputs(self, rank: int, channels: int, dtype: Any) -> tuple[Any, Any]:
        """Rank r's input (scaled and shifted by r, so ranks differ in mean and variance) and grad_output."""
        g = torch.Generator().manual_seed(7919 * rank + channels)
        shape = (self.batch, channels, self.spatial, self.spatial)
        x = torch.randn(shape, generator=g) * (1 + 0.25 * rank) + 0.5 * rank
        return x.to(dtype), torch.randn(shape, generator=g).to(dtype)

    def _reference(self, inputs: list[tuple[Any, Any]], rank: int, module: Any) -> dict[str, Any]:
        """torch.nn.BatchNorm2d in float64 on every rank's batch; this rank's slice of its results."""
        from commbench.syncbn.stats import reduce_dims

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
            "output": y_all[mine].detach(),
            "grad_input": x_all.grad[mine],
            "grad_weight": (dy * x_hat.detach()).sum(dims),
            "grad_bias": dy.sum(dims),
            "running_mean": ref.running_mean,
            "running_var": ref.running_var,
        }

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
            with recording(args.variant, args.backend):
                layer.y = layer.module(layer.x)

    def issue(self, args: CollArgs, phase: str) -> None:
        layer: _Layer = args.state
        with recording(args.variant, args.backend):
            if phase != "backward":
                layer.y = layer.module(layer.x)
            if phase != "forward":
                # The graph is kept, so that nonblocking mode may run several backwards of one forward.
                layer.y.backward(layer.dy, retain_graph=phase == "backward")

    def wrong(self, args: CollArgs, phase: str) -> int:
        from commbench.syncbn.stats import stat_dtype

        layer: _Layer = args.state
        tol = _tolerance(args.dtype)
        stat_tol = _tolerance(stat_dtype(args.dtype))
        found = {"running_mean": layer.module.running_mean, "running_var": layer.module.running_var}
        if phase != "backward":
            found["output"] = layer.y
        if phase != "forward":
            found.update(
                grad_input=layer.x.grad, grad_weight=layer.module.weight.grad, grad_bias=layer.module.bias.grad
            )
        wrong = 0
        for key, actual in found.items():
            expected = args.expected[key]
            if actual is None:
                wrong += expected.numel()
            else:
                wrong += count_wrong(actual.detach(), expected, tol if key in ("output", "grad_input") else stat_tol)
        return wrong

    def size_bytes(self, args: CollArgs, phase: str) -> int:
        from commbench.syncbn.stats import stat_dtype
        from commbench.syncbn.strategies import STRATEGIES

        strategy = STRATEGIES[_NATIVE_PATTERN.get(args.variant, args.variant)]
        stat_bytes = torch.empty((), dtype=stat_dtype(args.dtype)).element_size()
        forward = strategy.forward_bytes(args.count, args.world_size, stat_bytes)
        backward = strategy.backward_bytes(args.count, args.world_size, stat_bytes)
        return {"forward": forward, "backward": backward}.get(phase, forward + backward)
