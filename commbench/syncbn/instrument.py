"""Counting the collective calls of the native SyncBatchNorm layers (torch.nn.SyncBatchNorm,
hvd.SyncBatchNorm) as commbench's own strategies' calls are counted: through backend.record.

The native layers call torch.distributed / Horovod themselves, not a commbench backend, so their
calls are counted by swapping the module globals they look the collectives up in for counting
wrappers, only while the layer runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from commbench.syncbn import NATIVE_VARIANTS

NATIVE_TORCH, NATIVE_HOROVOD = NATIVE_VARIANTS


def native_calls(variant: str) -> tuple[str, dict[str, str]] | None:
    """For a native layer: the module whose globals it calls its collectives through (looked up at
    each call), and the name each is recorded under (the backend's name for the same call)."""
    if variant == NATIVE_TORCH:
        from commbench.backends.torch_dist import FLAT_ALL_GATHER

        return "torch.distributed", {name: name for name in (*FLAT_ALL_GATHER, "all_gather", "all_reduce")}
    if variant == NATIVE_HOROVOD:
        return "horovod.torch.sync_batch_norm", {"allgather_async": "allgather", "allreduce_async": "allreduce"}
    return None


@contextmanager
def recording(variant: str, backend: Any) -> Iterator[None]:
    """Inside, the native layer's collective calls go through backend.record, as the strategies' do.

    torch.nn.SyncBatchNorm and hvd.SyncBatchNorm call torch.distributed / Horovod themselves, so
    without this their rows would say calls = 0 with no api, and a rank hung inside one would look
    idle to the heartbeat records (commbench/run/heartbeat.py). Each call is counted as it is made, not declared: a one-rank
    layer, which skips communication, counts none. The layer's module globals are swapped for
    counting wrappers only while it runs (the backward's autograd thread looks them up too).
    """
    if (calls := native_calls(variant)) is None:
        yield
        return
    module_name, names = calls
    module = importlib.import_module(module_name)
    originals = {attr: getattr(module, attr) for attr in names if hasattr(module, attr)}
    for attr, fn in originals.items():
        setattr(module, attr, _recorded(fn, names[attr], backend))
    try:
        yield
    finally:
        for attr, fn in originals.items():
            setattr(module, attr, fn)


def _recorded(fn: Callable[..., Any], api: str, backend: Any) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        backend.record(api)
        return fn(*args, **kwargs)

    return call
