"""The op registry: names, one-line summaries and what S means, without importing torch.

Adding an op touches its own module and one entry here (nccl-tests' contract). A user's own op
can be named as ``module:Class`` on the command line and is imported the same way.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from commbench.errors import UserError

if TYPE_CHECKING:
    from commbench.ops.base import Op


@dataclass(frozen=True)
class OpInfo:
    """What `commbench list` shows about an op, and where its code lives."""

    name: str
    target: str  # "module:Class"
    summary: str
    s_definition: str
    bus_factor: str


OPS: dict[str, OpInfo] = {
    info.name: info
    for info in (
        OpInfo(
            "all_gather",
            "commbench.ops.all_gather:AllGather",
            "every rank contributes count/n elements; all ranks receive all of them (variants: flat, list)",
            "S = gathered output bytes = per-rank count x element size x n",
            "(n-1)/n",
        ),
        OpInfo(
            "reduce_scatter_base",
            "commbench.ops.reduce_scatter_base:ReduceScatterBase",
            "sum n shards over ranks; rank r keeps shard r (variants: flat, list)",
            "S = full input bytes per rank = shard count x element size x n",
            "(n-1)/n",
        ),
        OpInfo(
            "grouped_all_gather",
            "commbench.ops.grouped_all_gather:GroupedAllGather",
            "K small tensors gathered together, default SyncBN's (1, C, C) with C = S / (2 x element size x n) "
            "up to 4096, or --tensors (variants: separate, concat, coalesced, grouped)",
            "S = total gathered bytes over the K tensors = sum of per-rank elements x element size x n",
            "(n-1)/n",
        ),
        OpInfo(
            "bucketed_reduce_scatter",
            "commbench.ops.bucketed_reduce_scatter:BucketedReduceScatter",
            "FSDP gradient reduce-scatter of a workload of many tensors (--tensors, default a small transformer), "
            "one step per iteration (variants: per_tensor, bucketed_<cap>MB per --bucket-cap-mb, flat)",
            "S = the whole workload's bytes per rank, each tensor padded to a multiple of n (one step)",
            "(n-1)/n",
        ),
        OpInfo(
            "all_reduce",
            "commbench.ops.all_reduce:AllReduce",
            "sum in place over ranks (variant: flat)",
            "S = count x element size",
            "2(n-1)/n",
        ),
        OpInfo(
            "bucketed_all_reduce",
            "commbench.ops.bucketed_all_reduce:BucketedAllReduce",
            "DDP / apex gradient averaging of the --tensors workload, one step per iteration "
            "(variants: per_tensor, bucketed_<M> per --message-size in elements)",
            "S = the whole workload's bytes (one step)",
            "2(n-1)/n",
        ),
        OpInfo(
            "sync_bn",
            "commbench.ops.sync_bn:SyncBN",
            "one SyncBatchNorm layer on (N per rank, C, H, W) input, swept over C (--channels, --batch, --spatial); "
            "phases forward, backward, forward_backward; the count column is C (variants: torch, torch_legacy, apex, "
            "horovod, horovod_grouped, allreduce; native_torch and native_horovod on CUDA)",
            "S = bytes the phase communicates, each call counted as nccl-tests does (all-gather: gathered output; "
            "all-reduce: buffer), statistics 4 bytes each (8 for float64): forward (2C+1) x 4 x n for the gathering "
            "strategies, (2C+1) x 4 for allreduce; backward 2C x 4; forward_backward the sum",
            "1 (busbw = algbw: a phase mixes gathers and reduces)",
        ),
    )
}


def op_names() -> list[str]:
    return list(OPS)


def resolve_target(name: str) -> str:
    """Registered name or 'module:Class' -> 'module:Class'; unknown names list the valid ones."""
    if name in OPS:
        return OPS[name].target
    if ":" in name:
        return name
    raise UserError(f"unknown op {name!r}; valid ops: {', '.join(OPS)} (or module:Class for your own)")


def load_op(name: str) -> type["Op"]:
    """Import an op class by registered name or 'module:Class'."""
    module_name, _, attr = resolve_target(name).partition(":")
    try:
        module = importlib.import_module(module_name)
        return getattr(module, attr)
    except (ImportError, AttributeError) as exc:
        raise UserError(f"cannot load op {name!r}: {exc}") from None
