"""Measure op cases on every rank of a real group (for run_ranks): one checked result per case."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from commbench.backends.gloo import torch_lacks
from commbench.ops.args import CollArgs
from commbench.ops.base import Op
from commbench.ops.spec import Point
from commbench.run.harness import measure
from commbench.run.watchdog import Watchdog


def run_case(
    backend: Any, op_cls: type[Op], options: Mapping[str, str], variant: str, dtype: str, size: int
) -> dict[str, Any]:
    """Two timed iterations and one checked one of (op, variant, dtype, size) with these op options."""
    op = op_cls(options)
    if (reason := op.unavailable(variant, backend)) is not None:
        return {"variant": variant, "dtype": dtype, "unavailable": reason}
    args = CollArgs(backend=backend, dtype=getattr(torch, dtype), variant=variant)
    op.setup(args, Point.of_size(size))
    m = measure(
        op,
        args,
        op.phases[0],
        iters=2,
        warmup=1,
        window=1,
        check=True,
        watchdog=Watchdog(60, backend.rank),
        label=f"{op.name}/{variant}",
    )
    return {
        "variant": variant,
        "dtype": dtype,
        "wrong": m.wrong,
        "count": args.count,
        "calls": m.calls,
        "apis": m.apis,
        "s_bytes": op.size_bytes(args, op.phases[0]),
    }


def run_cases(backend: Any, cases: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    return [run_case(backend, *case) for case in cases]


def every_variant(
    op_cls: type[Op], options: Mapping[str, str], dtypes: tuple[str, ...], sizes: tuple[int, ...]
) -> list[tuple[Any, ...]]:
    """Cases for every variant of the op x dtypes x the sizes the op measures of these."""
    op = op_cls(options)
    points = op.points(list(sizes))
    return [(op_cls, dict(options), v, d, p.size_bytes) for v in op.variants for d in dtypes for p in points]


def gloo_lacks() -> dict[tuple[str, str], str]:
    """(op name, variant) that this torch's Gloo has no collective for, with the reason its
    `unavailable` row gives (commbench/backends/gloo.py SINCE_TORCH): torch 2.11's list all_to_all."""
    reason = torch_lacks("all_to_all_list")
    return {("all_to_all", "list"): reason} if reason else {}


def not_ok(frame: Any) -> Any:
    """A sweep's rows that are neither ok and right nor an `unavailable` row of what gloo_lacks()
    names (with its reason): empty when the sweep ran everything this torch's Gloo has."""
    lacked = gloo_lacks()
    expected = [
        row.status == "unavailable" and lacked.get((row.op, row.variant)) == row.note
        if (row.op, row.variant) in lacked
        else row.status == "ok" and row.wrong == 0
        for row in frame.itertuples()
    ]
    return frame[[not e for e in expected]]
