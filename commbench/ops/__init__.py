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
